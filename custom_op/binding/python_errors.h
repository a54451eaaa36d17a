// How the binding reports failures to Python: bad data raises
// custom_op.JpegDecodeError, a failed allocation MemoryError, anything else
// RuntimeError (the core's StatusCode says which), and exceptions caught
// where none may escape (a batch thread, a GIL-free section) become a
// Status first. It owns that mapping and nothing else.
// Included only by decode_and_crop_jpeg.cpp, the extension's one
// translation unit, hence the anonymous namespace.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/utils/pybind.h>

#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "csrc/jpeg_errors.h"

namespace py = pybind11;

namespace {

// Thrown for bad data; translated into custom_op.JpegDecodeError.
class JpegDecodeError : public std::exception {
 public:
  explicit JpegDecodeError(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// An allocation that failed, with the allocator's message.
class AllocationFailed : public std::bad_alloc {
 public:
  explicit AllocationFailed(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Bad arguments raise ValueError, bad data JpegDecodeError, a failed
// allocation MemoryError, anything else RuntimeError (see StatusCode).
[[noreturn]] void raise_status(const char* function, const custom_op::Status& status,
                               const std::string& context = "") {
  const std::string message = std::string(function) + "(): " + context + status.message;
  switch (status.code) {
    case custom_op::StatusCode::kInvalidArgument:
      throw py::value_error(message);
    case custom_op::StatusCode::kOutOfMemory:
      PyErr_SetString(PyExc_MemoryError, message.c_str());
      throw py::error_already_set();
    case custom_op::StatusCode::kDecodeError:
      throw JpegDecodeError(message);
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
