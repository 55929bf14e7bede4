// The bridge between pybind11 and the runtime contract: the pieces pybind_runtime.h binds every runtime with (and
// that bindings.cpp files may use for their extras). Together with pybind_runtime.h, the only code that knows both.
//
// It provides what is needed to
//  * translate tg:: exceptions into Python ones (register_exception_translators),
//  * turn Python launch arguments into KernelArgs (LaunchArgs) or graph arguments (to_bound_arg), and launch
//    dimensions into LaunchDims (dims_from),
//  * give the Python class bound to tg::Buffer a safe buffer protocol (enable_buffer_protocol),
//  * copy between Python buffers and tg::Buffers (copyin / copyout).
//
// Python arguments accepted as kernel arguments, checked in this order:
//  1. the module's buffer class (tg::Buffer, e.g. HostBuffer)   -> its DevicePtr; ValueError if freed
//  2. int (and bool)                                             -> integer; any value in [-2**63, 2**64), else a
//                                                                   ValueError naming the argument
//  3. an object with the buffer protocol (numpy array, bytearray, memoryview, bytes) -> pointer to its data, where
//     the module's ArgPolicy accepts host memory (CPU); a TypeError from the policy elsewhere (CUDA).
//     It must be contiguous (C or Fortran order). Read-only buffers (bytes, read-only arrays) are accepted: the
//     kernel must not write through them. 0-dimensional exports (numpy scalars) are read as integers if they
//     have __index__ and refused otherwise, since a pointer to a temporary scalar is never what was meant.
//  4. anything else with __index__                              -> integer
// The buffers are held (and tg::Buffers pinned) until the launch returns, so the GIL can be released meanwhile.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "buffer.h"
#include "errors.h"
#include "runtime.h"

namespace tg::pyb {

namespace py = pybind11;

// ---------------------------------------------------------------------------------------------------------------
// Exceptions
// ---------------------------------------------------------------------------------------------------------------
namespace detail {

inline PyObject* py_str(const std::string& s) {
  // Driver and loader messages may contain non-UTF-8 bytes (file names); never fail on them.
  return PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
}

// Raises `type(what)` with the parts of the error as attributes (.device, .call, .driver_error), so Python code
// can inspect them without parsing the message. Must not throw: it runs inside an exception translator.
inline void raise_runtime_error(PyObject* type, const RuntimeError& e) noexcept {
  PyObject* msg = py_str(e.what());
  PyObject* exc = msg ? PyObject_CallOneArg(type, msg) : nullptr;
  Py_XDECREF(msg);
  if (exc == nullptr) return;  // the failure to build it is the error now
  const std::pair<const char*, const std::string*> fields[] = {
      {"device", &e.device()}, {"call", &e.call()}, {"driver_error", &e.driver_error()}};
  for (const auto& [name, value] : fields) {
    PyObject* v = py_str(*value);
    if (v == nullptr || PyObject_SetAttrString(exc, name, v) != 0) PyErr_Clear();
    Py_XDECREF(v);
  }
  PyErr_SetObject(type, exc);
  Py_DECREF(exc);
}

}  // namespace detail

// Registers, for the calling module only, the translation of tg:: exceptions:
//   tg::OutOfMemory -> MemoryError, tg::RuntimeError -> RuntimeError (full message; .device/.call/.driver_error),
//   tg::BufferInUse -> BufferError, tg::UsageError -> ValueError.
// Local to the module so each backend translates its own copies of these (header-only) types.
inline void register_exception_translators() {
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OutOfMemory& e) {
      detail::raise_runtime_error(PyExc_MemoryError, e);
    } catch (const RuntimeError& e) {
      detail::raise_runtime_error(PyExc_RuntimeError, e);
    } catch (const BufferInUse& e) {
      PyErr_SetString(PyExc_BufferError, e.what());
    } catch (const UsageError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Held Python buffer views
// ---------------------------------------------------------------------------------------------------------------

// A Python buffer view held for as long as the object lives. Create and destroy with the GIL held.
class HeldView {
 public:
  HeldView(py::handle obj, int flags) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) throw py::error_already_set();
  }
  ~HeldView() { PyBuffer_Release(&view_); }
  HeldView(const HeldView&) = delete;
  HeldView& operator=(const HeldView&) = delete;

  void* data() const { return view_.buf; }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_;
};

// ---------------------------------------------------------------------------------------------------------------
// Argument conversion
// ---------------------------------------------------------------------------------------------------------------

// What a module accepts as kernel arguments besides its buffer class and integers.
struct ArgPolicy {
  // Objects with the buffer protocol pass as pointers to their host memory (rule 3 above). Only for devices whose
  // kernels read host memory (CPU); elsewhere they are refused with a TypeError (0-dimensional integer exports,
  // numpy integer scalars, still count as integers).
  bool host_memory;
  // The TypeError's text for a refused argument, before ", got <type>".
  const char* refusal;
};

namespace detail {

enum class ArgSource { DeviceBuffer, Integer, HostMemory };

inline std::string arg_name(size_t index) { return "args[" + std::to_string(index) + "]"; }

// The integer value of a Python int as 64 bits: [-2**63, 2**63) as itself, [2**63, 2**64) as its two's-complement
// bits (addresses passed as ints can be above 2**63). ValueError naming `what` for anything wider.
inline std::int64_t to_int64(PyObject* number, const std::string& what) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(number, &overflow);
  if (overflow == 0) {
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    return v;
  }
  if (overflow > 0) {
    unsigned long long u = PyLong_AsUnsignedLongLong(number);
    if (!(u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) return static_cast<std::int64_t>(u);
    PyErr_Clear();
  }
  throw py::value_error(what + ": integer does not fit in 64 bits");
}

// An integer from an object with __index__.
inline std::int64_t index_to_int64(py::handle obj, const std::string& what) {
  py::object number = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!number) throw py::error_already_set();
  return to_int64(number.ptr(), what);
}

[[noreturn]] inline void refuse(py::handle obj, size_t index, const ArgPolicy& policy) {
  throw py::type_error(arg_name(index) + ": " + policy.refusal + ", got " + std::string(Py_TYPE(obj.ptr())->tp_name));
}

// Classifies one Python argument. For HostMemory, `*view` holds a buffer view the caller must release; for
// Integer, `*integer` is the value. DeviceBuffer is left for the caller to cast (it needs either a reference or a
// shared_ptr).
inline ArgSource classify(py::handle obj, size_t index, const ArgPolicy& policy, Py_buffer* view,
                          std::int64_t* integer) {
  if (py::isinstance<Buffer>(obj)) return ArgSource::DeviceBuffer;
  if (PyLong_Check(obj.ptr())) {
    *integer = to_int64(obj.ptr(), arg_name(index));
    return ArgSource::Integer;
  }
  if (PyObject_CheckBuffer(obj.ptr())) {
    // Writable first; fall back to read-only (documented above: accepted, must not be written).
    if (PyObject_GetBuffer(obj.ptr(), view, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE) != 0) {
      PyErr_Clear();
      if (PyObject_GetBuffer(obj.ptr(), view, PyBUF_ANY_CONTIGUOUS) != 0) {
        py::error_already_set err;
        if (!policy.host_memory) refuse(obj, index, policy);
        throw py::value_error(arg_name(index) + ": buffer is not usable as a kernel argument: " + err.what());
      }
    }
    if (view->ndim != 0) {
      if (policy.host_memory) return ArgSource::HostMemory;
      PyBuffer_Release(view);
      refuse(obj, index, policy);
    }
    PyBuffer_Release(view);
    if (PyIndex_Check(obj.ptr())) {
      *integer = index_to_int64(obj, arg_name(index));
      return ArgSource::Integer;
    }
    throw py::type_error(arg_name(index) + ": a 0-dimensional buffer (" + std::string(Py_TYPE(obj.ptr())->tp_name) +
                         ") is not a kernel argument; pass an int, or an array for a pointer");
  }
  if (PyIndex_Check(obj.ptr())) {
    *integer = index_to_int64(obj, arg_name(index));
    return ArgSource::Integer;
  }
  refuse(obj, index, policy);
}

// At most `capacity` elements (fixed at construction), stored inline up to N: the launch path converts the
// arguments of every call and must not allocate for the usual handful. Elements never move once placed (a held
// Py_buffer must not).
template <class T, size_t N>
class ScratchArray {
 public:
  explicit ScratchArray(size_t capacity) {
    if (capacity > N) {
      heap_.reset(new T[capacity]);
      data_ = heap_.get();
    }
  }
  ScratchArray(const ScratchArray&) = delete;
  ScratchArray& operator=(const ScratchArray&) = delete;

  T& emplace_back() { return data_[size_++]; }
  void push_back(const T& v) { data_[size_++] = v; }
  void pop_back() noexcept { --size_; }
  T& back() noexcept { return data_[size_ - 1]; }
  const T* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  T* begin() noexcept { return data_; }
  T* end() noexcept { return data_ + size_; }
  void clear() noexcept { size_ = 0; }

 private:
  T inline_[N];
  std::unique_ptr<T[]> heap_;
  T* data_ = inline_;
  size_t size_ = 0;
};

}  // namespace detail

// The converted arguments of one launch. Holds the Python buffer views and pins the tg::Buffers it references
// until destroyed, so the launch itself can run without the GIL. Create and destroy with the GIL held.
class LaunchArgs {
 public:
  LaunchArgs(const py::args& args, const ArgPolicy& policy) : args_(args.size()), views_(args.size()),
                                                              pinned_(args.size()) {
    try {
      for (size_t i = 0; i < args.size(); ++i) add(args[i], i, policy);
    } catch (...) {
      release();  // a throwing constructor gets no destructor call
      throw;
    }
  }
  ~LaunchArgs() { release(); }
  LaunchArgs(const LaunchArgs&) = delete;
  LaunchArgs& operator=(const LaunchArgs&) = delete;

  const KernelArg* data() const { return args_.data(); }
  size_t size() const { return args_.size(); }

 private:
  // Inline room for this many arguments: rendered kernels rarely take more.
  static constexpr size_t kInline = 16;

  void add(py::handle obj, size_t index, const ArgPolicy& policy) {
    std::int64_t integer = 0;
    Py_buffer& view = views_.emplace_back();
    detail::ArgSource source;
    try {
      source = detail::classify(obj, index, policy, &view, &integer);
    } catch (...) {
      views_.pop_back();  // classify holds no view when it throws
      throw;
    }
    switch (source) {
      case detail::ArgSource::DeviceBuffer: {
        views_.pop_back();
        Buffer& b = obj.cast<Buffer&>();
        pinned_.push_back(&b);
        b.pin();
        args_.push_back(KernelArg::pointer(b.ptr()));  // after pinning: ptr() throws if already freed
        break;
      }
      case detail::ArgSource::Integer:
        views_.pop_back();
        args_.push_back(KernelArg::integer(integer));
        break;
      case detail::ArgSource::HostMemory:
        args_.push_back(KernelArg::pointer(reinterpret_cast<DevicePtr>(view.buf)));
        break;
    }
  }

  void release() noexcept {
    for (Py_buffer& v : views_) PyBuffer_Release(&v);
    views_.clear();
    for (Buffer* b : pinned_) b->unpin();
    pinned_.clear();
  }

  detail::ScratchArray<KernelArg, kInline> args_;
  detail::ScratchArray<Py_buffer, kInline> views_;
  detail::ScratchArray<Buffer*, kInline> pinned_;
};

// One graph argument. A buffer-protocol object's view is held by the BoundArg's keep_alive token (released, with
// the GIL, when the argument is replaced or the graph dies); a tg::Buffer is shared and resolved at each replay.
inline BoundArg to_bound_arg(py::handle obj, size_t index, const ArgPolicy& policy) {
  BoundArg arg;
  std::int64_t integer = 0;
  auto view = std::make_unique<Py_buffer>();
  switch (detail::classify(obj, index, policy, view.get(), &integer)) {
    case detail::ArgSource::DeviceBuffer:
      arg.buffer = obj.cast<std::shared_ptr<Buffer>>();
      arg.value = KernelArg::pointer(arg.buffer->ptr());  // fail early for a freed buffer; refreshed at replay
      break;
    case detail::ArgSource::Integer:
      arg.value = KernelArg::integer(integer);
      break;
    case detail::ArgSource::HostMemory:
      arg.value = KernelArg::pointer(reinterpret_cast<DevicePtr>(view->buf));
      arg.keep_alive = std::shared_ptr<const void>(view.release(), [](Py_buffer* v) {
        py::gil_scoped_acquire gil;  // graphs may be destroyed from C++ without the GIL
        PyBuffer_Release(v);
        delete v;
      });
      break;
  }
  return arg;
}

inline std::vector<BoundArg> to_bound_args(const py::list& args, const ArgPolicy& policy) {
  std::vector<BoundArg> out;
  out.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) out.push_back(to_bound_arg(args[i], i, policy));
  return out;
}

// Launch dimensions from Python: None (the backend's default) or sequences of at most three ints in
// [1, 2**32 - 1]; a missing sequence counts as (1, 1, 1). ValueError naming the argument otherwise.
inline void read_dims(py::handle seq, std::uint32_t out[3], const char* what) {
  out[0] = out[1] = out[2] = 1;
  if (seq.is_none()) return;
  py::sequence s = py::reinterpret_borrow<py::sequence>(seq);
  if (s.size() > 3) throw py::value_error(std::string(what) + " has more than 3 dimensions");
  for (size_t i = 0; i < s.size(); ++i) {
    std::string name = std::string(what) + "[" + std::to_string(i) + "]";
    std::int64_t v = detail::index_to_int64(s[i], name);
    if (v < 1 || v > 0xFFFFFFFFLL)
      throw py::value_error(std::string(what) + " dimensions must be between 1 and 2**32-1, got " +
                            std::to_string(v));
    out[i] = static_cast<std::uint32_t>(v);
  }
}

// nullptr (the backend's default) when both are None, else *dims filled from them.
inline const LaunchDims* dims_from(py::handle global, py::handle local, LaunchDims* dims) {
  if (global.is_none() && local.is_none()) return nullptr;
  read_dims(global, dims->global, "global_size");
  read_dims(local, dims->local, "local_size");
  return dims;
}

// ---------------------------------------------------------------------------------------------------------------
// tg::Buffer as a Python buffer
// ---------------------------------------------------------------------------------------------------------------
namespace detail {

// A writable, 1-D, format 'B' view of a host-visible Buffer (or of any T with the same host_ptr(), nbytes(), pin()
// and unpin()). The export pins the object: free() raises BufferError while a memoryview or numpy array still looks
// at the memory, instead of leaving it dangling.
template <class T>
int buffer_getbuffer(PyObject* self, Py_buffer* view, int flags) noexcept {
  view->obj = nullptr;
  try {
    T& b = py::handle(self).cast<T&>();
    void* p = b.host_ptr();  // ValueError after free()
    if (PyBuffer_FillInfo(view, self, p, static_cast<Py_ssize_t>(b.nbytes()), /*readonly=*/0, flags) != 0) return -1;
    b.pin();
    return 0;
  } catch (const UsageError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return -1;
}

template <class T>
void buffer_releasebuffer(PyObject* self, Py_buffer* /*view*/) noexcept {
  try {
    py::handle(self).cast<T&>().unpin();
  } catch (...) {  // cannot happen for an object that exported successfully; never let it escape into CPython
  }
}

}  // namespace detail

// Call on the py::class_ bound to tg::Buffer (declared with py::buffer_protocol()) to install the pinning export
// above in place of pybind11's own, which has no release hook. Also for other classes whose C++ type offers
// host_ptr(), nbytes(), pin() and unpin() as tg::Buffer does (the CUDA runtime's pinned host buffers).
template <class PyClass>
void enable_buffer_protocol(PyClass& cls) {
  using T = typename PyClass::type;
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  if (type->tp_as_buffer == nullptr) throw std::logic_error("enable_buffer_protocol: declare py::buffer_protocol()");
  type->tp_as_buffer->bf_getbuffer = &detail::buffer_getbuffer<T>;
  type->tp_as_buffer->bf_releasebuffer = &detail::buffer_releasebuffer<T>;
}

// copyin(dst, src): copies all of `src` (any contiguous buffer) to the start of `dst`. ValueError naming both sizes
// if it does not fit.
inline void copyin(Buffer& dst, py::handle src) {
  HeldView view(src, PyBUF_ANY_CONTIGUOUS);
  BufferPin pin(dst);
  py::gil_scoped_release nogil;
  dst.copyin(view.data(), view.size());
}

// copyout(dst, src): fills all of `dst` (a writable contiguous buffer) from the start of `src`. ValueError naming
// both sizes if `dst` is larger than `src`.
inline void copyout(py::handle dst, Buffer& src) {
  HeldView view(dst, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE);
  BufferPin pin(src);
  py::gil_scoped_release nogil;
  src.copyout(view.data(), view.size());
}

}  // namespace tg::pyb
