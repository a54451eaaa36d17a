// The encoded bytes a call reads: borrowed, never copied, from a uint8
// tensor (whose storage is held for the call) or from any object with the
// buffer protocol (whose view stays open). It owns the checks of the input's
// type and shape at the native boundary and the lifetime of the borrow.
// Included only by decode_and_crop_jpeg.cpp, the extension's one
// translation unit, hence the anonymous namespace.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

// The encoded bytes, borrowed from a tensor or a buffer that outlives the call.
struct ByteSpan {
  const uint8_t* data;
  size_t size;
};

ByteSpan span_of_tensor(const at::Tensor& data) {
  if (data.scalar_type() != at::kByte) {
    throw py::type_error("data must be a uint8 tensor, got " + std::string(c10::toString(data.scalar_type())));
  }
  if (data.dim() != 1 || !data.device().is_cpu() || !data.is_contiguous()) {
    throw py::value_error("data must be a 1-D contiguous CPU tensor");
  }
  return ByteSpan{data.data_ptr<uint8_t>(), static_cast<size_t>(data.numel())};
}

ByteSpan span_of_buffer(const py::buffer_info& info) {
  if (info.itemsize != 1 || info.ndim != 1 || (info.size > 1 && info.strides[0] != 1)) {
    throw py::value_error("data must be a 1-D contiguous buffer of bytes");
  }
  return ByteSpan{static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size)};
}

// The encoded bytes of one input, borrowed for the duration of a call: from
// a tensor's storage, or from a buffer whose view stays open while this
// object lives.
//
// The decode runs with the GIL released, so another thread may call set_()
// on the tensor meanwhile, which would free the old bytes if only the tensor
// were held: holding the storage keeps them alive. resize_() of the same
// tensor can still reallocate the storage's memory in place, as for every
// ATen operator that reads a tensor on another thread; the public
// docstrings say so.
class BorrowedBytes {
 public:
  explicit BorrowedBytes(const at::Tensor& data)
      : span_(span_of_tensor(data)), storage_(data.storage()) {}
  explicit BorrowedBytes(const py::buffer& data)
      : view_(std::make_unique<py::buffer_info>(data.request())), span_(span_of_buffer(*view_)) {}
  ByteSpan span() const { return span_; }

 private:
  std::unique_ptr<py::buffer_info> view_;
  ByteSpan span_;
  c10::Storage storage_;
};

// The bytes of every batch member, borrowed for the whole call.
std::vector<BorrowedBytes> borrow_all(const py::sequence& datas) {
  std::vector<BorrowedBytes> borrowed;
  borrowed.reserve(datas.size());
  const py::object tensor_class = py::module_::import("torch").attr("Tensor");
  for (const py::handle item : datas) {
    if (py::isinstance(item, tensor_class)) {
      borrowed.emplace_back(py::cast<at::Tensor>(item));
    } else {
      borrowed.emplace_back(py::reinterpret_borrow<py::buffer>(item));
    }
  }
  return borrowed;
}

}  // namespace
