// How the binding reports failures to Python: bad data raises
// custom_op.JpegDecodeError, a failed allocation MemoryError, anything else
// RuntimeError (the core's StatusCode says which), and exceptions caught
// where none may escape (a batch thread, a GIL-free section) become a
// Status first. It owns that mapping, and the GIL handling that lets the
// pybind11 functions and the registered operators share it.
// Included only by decode_and_crop_jpeg.cpp, the extension's one
// translation unit, hence the anonymous namespace.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/utils/pybind.h>

#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>

#include "csrc/jpeg_errors.h"

namespace py = pybind11;

namespace {

// custom_op._errors.JpegDecodeError, set by the module's init (which holds
// the GIL) before any function or operator of the module can run. Null only if
// the library was loaded without its Python module (torch.ops.load_library):
// bad data then raises RuntimeError. A bare handle, leaked on purpose: a
// static py::object would be destroyed after the interpreter finalised,
// decrementing a reference it no longer owns.
PyObject* jpeg_decode_error_class = nullptr;

// Releases the GIL for its lifetime if this thread holds it. pybind11 calls
// the module's functions with the GIL held; torch calls a registered
// operator from Python with it already released. Either way the decode runs
// without it.
class GilReleased {
 public:
  GilReleased() {
    if (PyGILState_Check()) {
      release_.emplace();
    }
  }

 private:
  std::optional<py::gil_scoped_release> release_;
};

// Raises `python_class` with `message`, taking the GIL if this thread does not
// hold it (a registered operator's kernel). The exception travels to Python as
// pybind11's error_already_set, which both pybind11 and torch's operator call
// hand over as the Python exception it holds: the caller sees the class
// itself, in eager code and in a torch.compile'd graph alike.
[[noreturn]] void raise_python(PyObject* python_class, const std::string& message) {
  py::gil_scoped_acquire gil;
  PyErr_SetString(python_class, message.c_str());
  throw py::error_already_set();
}

// An allocation that failed, with the allocator's message.
class AllocationFailed : public std::bad_alloc {
 public:
  explicit AllocationFailed(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Bad arguments raise ValueError, bad data JpegDecodeError, a failed
// allocation MemoryError, anything else RuntimeError (see StatusCode). Call
// it with or without the GIL. py::value_error and std::runtime_error need no
// GIL to be thrown: pybind11 and torch's operator call turn them into
// ValueError and RuntimeError.
[[noreturn]] void raise_status(const char* function, const custom_op::Status& status,
                               const std::string& context = "") {
  const std::string message = std::string(function) + "(): " + context + status.message;
  switch (status.code) {
    case custom_op::StatusCode::kInvalidArgument:
      throw py::value_error(message);
    case custom_op::StatusCode::kOutOfMemory:
      raise_python(PyExc_MemoryError, message);
    case custom_op::StatusCode::kDecodeError:
      if (jpeg_decode_error_class != nullptr) {
        raise_python(jpeg_decode_error_class, message);
      }
      break;
    case custom_op::StatusCode::kOk:
    case custom_op::StatusCode::kInternalError:
      break;
  }
  throw std::runtime_error(message);
}

// The Status for an exception caught where none may escape (a batch thread,
// a GIL-free section): allocation failures are kOutOfMemory, the rest
// kInternalError. Call from a catch block.
custom_op::Status status_of_current_exception() {
  try {
    throw;
  } catch (const AllocationFailed& e) {
    return custom_op::Status{custom_op::StatusCode::kOutOfMemory, e.what()};
  } catch (const std::bad_alloc& e) {
    return custom_op::Status{custom_op::StatusCode::kOutOfMemory, std::string("out of memory: ") + e.what()};
  } catch (const c10::OutOfMemoryError& e) {
    return custom_op::Status{custom_op::StatusCode::kOutOfMemory, e.what_without_backtrace()};
  } catch (const c10::Error& e) {
    return custom_op::Status{custom_op::StatusCode::kInternalError, e.what_without_backtrace()};
  } catch (const std::exception& e) {
    return custom_op::Status{custom_op::StatusCode::kInternalError, e.what()};
  } catch (...) {
    return custom_op::Status{custom_op::StatusCode::kInternalError, "unknown exception"};
  }
}

// at::empty for uint8 bytes. ATen's CPU allocator reports a failed malloc as
// a plain c10::Error (torch.empty raises RuntimeError for it); with valid
// sizes, on the CPU, nothing else can fail here, so it becomes bad_alloc.
at::Tensor empty_bytes(at::IntArrayRef sizes) {
  try {
    return at::empty(sizes, at::kByte);
  } catch (const c10::Error& error) {
    throw AllocationFailed(error.what_without_backtrace());
  }
}

}  // namespace
