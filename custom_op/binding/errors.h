// How the binding reports failures. A kernel on torch's stable ABI cannot
// raise a Python exception: whatever it throws reaches Python as a
// RuntimeError carrying what() (and torch may add its own lines). So every
// failure that must keep its Python type is thrown with a tag naming that
// type, "[custom_op.ValueError] decode_and_crop_jpeg(): ...", which the
// Python layer (custom_op/_core/_errors.py, translate) turns back into ValueError,
// TypeError, MemoryError or custom_op.JpegDecodeError with the text after the
// tag. Failures without a tag are internal (RuntimeError, "this is a bug").
// Every tagged failure is a std::runtime_error: torch would turn a
// std::invalid_argument into ValueError by itself, whatever the tag says.
// docs/design.md ("The binding") says which type holds on which path.
// Included only by decode_and_crop_jpeg.cpp, the extension's one
// translation unit, hence the anonymous namespace.
#pragma once

#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "csrc/jpeg_errors.h"

namespace {

// The tag's form; custom_op/_core/_errors.py parses exactly this.
std::string tagged(const char* python_type, const std::string& message) {
  return std::string("[custom_op.") + python_type + "] " + message;
}

[[noreturn]] void throw_value_error(const std::string& message) {
  throw std::runtime_error(tagged("ValueError", message));
}

[[noreturn]] void throw_type_error(const std::string& message) {
  throw std::runtime_error(tagged("TypeError", message));
}

// An allocation that failed, with the allocator's message.
class AllocationFailed : public std::bad_alloc {
 public:
  explicit AllocationFailed(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// `text` tagged with the Python type that `status`'s code stands for: bad
// arguments ValueError, bad data JpegDecodeError, a failed allocation
// MemoryError; untagged (RuntimeError) for anything else (see StatusCode).
std::string tagged_status(const custom_op::Status& status, const std::string& text) {
  switch (status.code) {
    case custom_op::StatusCode::kInvalidArgument:
      return tagged("ValueError", text);
    case custom_op::StatusCode::kOutOfMemory:
      return tagged("MemoryError", text);
    case custom_op::StatusCode::kDecodeError:
      return tagged("JpegDecodeError", text);
    case custom_op::StatusCode::kOk:
    case custom_op::StatusCode::kInternalError:
      break;
  }
  return text;
}

[[noreturn]] void raise_status(const char* function, const custom_op::Status& status,
                               const std::string& context = "") {
  throw std::runtime_error(tagged_status(status, std::string(function) + "(): " + context + status.message));
}

// The Status for an exception caught where none may escape (a batch
// thread): allocation failures are kOutOfMemory, argument errors already
// tagged keep their text, the rest is kInternalError. Call from a catch block.
custom_op::Status status_of_current_exception() {
  try {
    throw;
  } catch (const AllocationFailed& e) {
    return custom_op::Status{custom_op::StatusCode::kOutOfMemory, e.what()};
  } catch (const std::bad_alloc& e) {
    return custom_op::Status{custom_op::StatusCode::kOutOfMemory, std::string("out of memory: ") + e.what()};
  } catch (const std::exception& e) {
    return custom_op::Status{custom_op::StatusCode::kInternalError, e.what()};
  } catch (...) {
    return custom_op::Status{custom_op::StatusCode::kInternalError, "unknown exception"};
  }
}

}  // namespace
