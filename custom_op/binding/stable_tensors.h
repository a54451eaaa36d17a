// The binding's tensors, on torch's stable ABI only (torch/csrc/stable):
// reading the encoded bytes of an input tensor, allocating outputs in the
// layouts the decodes write, the batch's per-image slices and outcomes. The
// ATen operators called by name live in binding/aten_calls.h.
// Nothing here depends on torch's C++ ABI, so one build serves every torch
// from TORCH_TARGET_VERSION on (see _build_config.TORCH_TARGET_VERSION).
// Included only by decode_and_crop_jpeg.cpp, the extension's one
// translation unit, hence the anonymous namespace.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "binding/aten_calls.h"
#include "binding/errors.h"
#include "csrc/pixel_formats.h"

namespace {

using torch::stable::Tensor;
using torch::headeronly::ScalarType;

// The encoded bytes, borrowed from an input tensor for the call. The kernel
// runs without the GIL; as for every PyTorch operator, another thread must
// not resize_(), set_() or write to the tensor until the call returns.
struct ByteSpan {
  const uint8_t* data;
  size_t size;
};

ByteSpan span_of_tensor(const Tensor& data) {
  if (data.scalar_type() != ScalarType::Byte) {
    throw_type_error(std::string("data must be a uint8 tensor, got ") +
                     torch::headeronly::toString(data.scalar_type()));
  }
  if (data.dim() != 1 || !data.is_cpu() || !data.is_contiguous()) {
    throw_value_error("data must be a 1-D contiguous CPU tensor");
  }
  return ByteSpan{static_cast<const uint8_t*>(data.const_data_ptr()), static_cast<size_t>(data.numel())};
}

// torch.empty for uint8 bytes. A failed malloc reaches us as the shim's
// error (a plain runtime_error); with valid sizes, on the CPU, nothing else
// can fail here, so it becomes bad_alloc (MemoryError).
Tensor empty_bytes(const std::vector<int64_t>& sizes) {
  try {
    return torch::stable::empty(sizes, ScalarType::Byte);
  } catch (const std::runtime_error& error) {
    throw AllocationFailed(error.what());
  }
}

custom_op::PixelOrder pixel_order(bool contiguous) {
  return contiguous ? custom_op::PixelOrder::kPlanar : custom_op::PixelOrder::kInterleaved;
}

// A new [channels, height, width] tensor: contiguous CHW for
// PixelOrder::kPlanar, else a view of contiguous HWC memory, which is what
// torchvision's decode_jpeg returns and what libjpeg writes.
Tensor new_output(int64_t channels, int64_t height, int64_t width, custom_op::PixelOrder order) {
  if (order == custom_op::PixelOrder::kPlanar) {
    return empty_bytes({channels, height, width});
  }
  return aten_permute(empty_bytes({height, width, channels}), {2, 0, 1});
}

// The tensor a decode writes its [channels, height, width] result to: `into`
// when the caller preallocated it (a slice of the batch's stacked output, in
// `order`, so that no stacking copy follows), else a new one.
Tensor output_tensor(const std::optional<Tensor>& into, int64_t channels, int64_t height,
                     int64_t width, custom_op::PixelOrder order) {
  return into.has_value() ? *into : new_output(channels, height, width, order);
}

uint8_t* bytes_of(const Tensor& tensor) { return static_cast<uint8_t*>(tensor.mutable_data_ptr()); }

// Whether the [1, C, H, W] `tensor` is channels_last (NHWC) memory.
bool is_channels_last(const Tensor& tensor) {
  const int64_t channels = tensor.size(1), width = tensor.size(3);
  return tensor.stride(1) == 1 && tensor.stride(3) == channels && tensor.stride(2) == channels * width;
}

// Whether `out` is laid out as the batch writes it: contiguous NCHW
// (planar), or NHWC memory seen as NCHW (channels_last).
bool has_batch_layout(const Tensor& out, custom_op::PixelOrder order) {
  if (order == custom_op::PixelOrder::kPlanar) {
    return out.is_contiguous();
  }
  const int64_t channels = out.size(1), height = out.size(2), width = out.size(3);
  return out.stride(1) == 1 && out.stride(3) == channels && out.stride(2) == channels * width &&
         out.stride(0) == channels * width * height;
}

// The per-image [C, H, W] views of the batch's preallocated N x C x H x W
// output, or none when there is no output to write into.
std::vector<std::optional<Tensor>> slices_of(const std::optional<Tensor>& stacked, size_t count,
                                             int64_t out_height, int64_t out_width,
                                             custom_op::PixelOrder order) {
  std::vector<std::optional<Tensor>> slices(count);
  if (!stacked.has_value()) {
    return slices;
  }
  const Tensor& out = *stacked;
  const bool fits = out.scalar_type() == ScalarType::Byte && out.is_cpu() && out.dim() == 4 &&
                    out.size(0) == static_cast<int64_t>(count) && out.size(2) == out_height &&
                    out.size(3) == out_width && has_batch_layout(out, order);
  if (!fits || out_height < 1) {
    throw_value_error("out must be a uint8 N x C x size tensor in the requested memory format (this is a bug in custom_op)");
  }
  for (size_t i = 0; i < count; ++i) {
    slices[i] = torch::stable::select(out, 0, static_cast<int64_t>(i));
  }
  return slices;
}

}  // namespace
