# Declarations of the engine lock (locks.pyx), for the Cython modules that take it on their hot paths.
from cpython.pythread cimport PyThread_type_lock


cdef class ReentrantLock:
    # the OS lock, held by the owner from its first acquire to its last release
    cdef PyThread_type_lock _lock
    # the owning thread's ident and how many times it has acquired (0: free)
    cdef unsigned long _owner
    cdef Py_ssize_t _depth
    # (fn, args) that other threads asked to run under the lock while it was held: run by the holder at its release
    cdef list _deferred

    cdef int enter(self) except -1
    cdef int leave(self) except -1
    cdef void _run_deferred(self) noexcept
