# cython: language_level=3
"""The engine lock: one re-entrant lock, held by a thread while it changes what threads share.

Realizing a graph writes state every thread sees: the lazy graph itself (a realized node drops its sources and gets
memory), the schedule-plan and method caches, the devices' queues and allocators' caches. Two threads realizing the
same unrealized tensor would both run its kernels, one allocating a buffer the other already filled. So each of
those steps holds `ENGINE_LOCK` (see docs/threads.md for the list): threads may build graphs and call the library
freely, and the parts that touch shared state take turns.

It is re-entrant (realizing can nest: a copy reads a buffer, a JIT capture realizes its inputs) and Cython, because
eager code takes it once per op: from a Cython module (`cimport`) an uncontended acquire and release is a few
nanoseconds of C, where `threading.RLock` costs 0.1-0.3 us from Python. Python code uses `with ENGINE_LOCK:`.

A thread that waits for it sleeps with the GIL released; Ctrl-C still interrupts the main thread while it waits.
A finalizer (a Buffer freed by the garbage collector, in whatever thread drops it) must never wait for the lock:
the thread holding it may be waiting for the finalizer's thread. `run_or_defer` runs such work now if the lock is
free (or already this thread's) and otherwise hands it to the holder, who runs it when it releases the lock.
"""
import os

from tinygrad.helpers import defer_interrupt

from cpython.exc cimport PyErr_CheckSignals, PyErr_Restore, PyErr_WriteUnraisable
from cpython.ref cimport Py_INCREF, PyObject
from cpython.pythread cimport (NOWAIT_LOCK, PY_LOCK_ACQUIRED, PyLockStatus, PyThread_acquire_lock,
                               PyThread_allocate_lock, PyThread_free_lock, PyThread_get_thread_ident,
                               PyThread_release_lock, PyThread_type_lock)


cdef extern from "pythread.h":
    # blocking acquire that gives up with PY_LOCK_INTR when a signal arrives (intr_flag), so Ctrl-C gets through
    PyLockStatus PyThread_acquire_lock_timed(PyThread_type_lock lock, long long microseconds, int intr_flag) nogil


cdef inline unsigned long _me() noexcept:
    return <unsigned long>PyThread_get_thread_ident()


cdef void _run_finalizer_work(fn, tuple args) noexcept:
    # work deferred by a finalizer runs as the finalizer would have: Ctrl-C landing in it is raised at the engine's
    # next check (helpers.defer_interrupt), and any other error goes to sys.unraisablehook ("Exception ignored in
    # ..."), never raised in the middle of the holder's own work
    try:
        fn(*args)
    except KeyboardInterrupt:
        defer_interrupt()
    except BaseException as e:
        t, tb = type(e), e.__traceback__
        # PyErr_Restore steals the three references
        Py_INCREF(t)
        Py_INCREF(e)
        Py_INCREF(tb)
        PyErr_Restore(<PyObject*>t, <PyObject*>e, <PyObject*>tb)
        PyErr_WriteUnraisable(fn)


cdef class ReentrantLock:
    """A re-entrant lock (as `threading.RLock`) with a C fast path for Cython callers; see the module docstring."""

    def __cinit__(self):
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError("can't allocate a lock")
        self._owner = 0
        self._depth = 0
        self._deferred = []

    def __dealloc__(self):
        if self._lock != NULL:
            PyThread_free_lock(self._lock)

    cdef int enter(self) except -1:
        """Acquire (again, if this thread holds it already); waits with the GIL released, and raises what a signal
        handler raised (KeyboardInterrupt) if one runs while it waits."""
        cdef unsigned long me = _me()
        cdef PyLockStatus r
        if self._depth > 0 and self._owner == me:
            self._depth += 1
            return 0
        if not PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
            while True:
                with nogil:
                    r = PyThread_acquire_lock_timed(self._lock, -1, 1)
                if r == PY_LOCK_ACQUIRED:
                    break
                # interrupted by a signal: run its Python handler (it may raise KeyboardInterrupt), then wait again
                if PyErr_CheckSignals() < 0:
                    return -1
        # NOTE: _owner and _depth are only read and written with the GIL held, so they are seen consistently
        self._owner = me
        self._depth = 1
        return 0

    cdef int leave(self) except -1:
        """Release once; the last release first runs the work other threads deferred to the holder."""
        if self._depth <= 0 or self._owner != _me():
            raise RuntimeError("the engine lock was released by a thread that doesn't hold it")
        if self._depth == 1 and self._deferred:
            self._run_deferred()
        self._depth -= 1
        if self._depth == 0:
            self._owner = 0
            PyThread_release_lock(self._lock)
        return 0

    cdef void _run_deferred(self) noexcept:
        while self._deferred:
            fn, args = self._deferred.pop(0)
            _run_finalizer_work(fn, args)

    def __enter__(self):
        self.enter()
        return self

    def __exit__(self, *exc):
        self.leave()
        return False

    def acquire(self):
        """Acquire (blocking); `with ENGINE_LOCK:` is the usual spelling."""
        self.enter()
        return True

    def release(self):
        self.leave()

    def run(self, fn, *args):
        """`fn(*args)` with the lock held: what `with ENGINE_LOCK:` does, in one call instead of the with statement's
        two (Buffer.allocate, once per eager op)."""
        self.enter()
        try:
            return fn(*args)
        finally:
            self.leave()

    def held(self):
        """Whether the calling thread holds the lock."""
        return self._depth > 0 and self._owner == _me()

    def run_or_defer(self, fn, *args):
        """`fn(*args)` under the lock without ever waiting for it: at once if the lock is free or this thread's,
        else by the thread holding it, when it releases it. For finalizers (see the module docstring)."""
        cdef unsigned long me = _me()
        if self._depth > 0 and self._owner == me:
            fn(*args)
            return
        if not PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
            # NOTE: the holder looks at the list just before its last release, with the GIL held. Appending can run
            # the garbage collector and let the holder go meanwhile, so the lock is tried once more after it: the
            # work never waits for a release that already happened
            self._deferred.append((fn, args))
            if not PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
                return
            self._owner, self._depth = me, 1
            self.leave()
            return
        self._owner, self._depth = me, 1
        try:
            fn(*args)
        finally:
            self.leave()

    def _after_fork(self):
        # the child has one thread: a lock some other thread of the parent held would never be released
        self._owner, self._depth = 0, 0
        PyThread_free_lock(self._lock)
        self._lock = PyThread_allocate_lock()


ENGINE_LOCK = ReentrantLock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=ENGINE_LOCK._after_fork)
