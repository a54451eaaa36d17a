// Every ATen operator the binding calls by name through torch's dispatcher
// (torch_call_dispatcher), in one place, as torchvision's StableABICompat.h
// keeps them. torch's stable headers gain wrappers for such calls over time
// (torch::stable::permute appeared only in 2.14's), so a wrapper used here
// would make the source build with the newest torch alone; the dispatcher
// call itself is in every torch from TORCH_TARGET_VERSION on, so the same
// source builds against every torch the package supports. The calls are
// checked with TORCH_ERROR_CODE_CHECK, which every such torch has; its
// successor STABLE_TORCH_ERROR_CODE_CHECK is missing from 2.10's headers and
// is the same macro below a TORCH_TARGET_VERSION of 2.13.
// Included only by decode_and_crop_jpeg.cpp, the extension's one
// translation unit, hence the anonymous namespace.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/shim_utils.h>

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

namespace {

// aten::permute: a view of `self` with its dimensions in the order `dims`.
torch::stable::Tensor aten_permute(const torch::stable::Tensor& self, const std::vector<int64_t>& dims) {
  using torch::stable::detail::from;
  std::array<StableIValue, 2> stack{from(self), from(torch::headeronly::IntHeaderOnlyArrayRef(dims))};
  TORCH_ERROR_CODE_CHECK(torch_call_dispatcher("aten::permute", "", stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<torch::stable::Tensor>(stack[0]);
}

// The [1, C, H, W] `input` resized to out_height x out_width by the very
// ATen kernel that torchvision's resize(antialias=...) runs on uint8 CPU
// tensors: aten::_upsample_bilinear2d_aa.vec or aten::upsample_bilinear2d.vec
// (input, output_size, align_corners=False, scale_factors=None). Not the
// .out overloads: the stable ABI hands a SymInt[] argument over as a list of
// SymInts, which ATen's CPU out kernels (registered with int lists) refuse
// ("Expected IntList but got GenericList"); the .vec overloads are
// symbolic-int aware. Without scale factors they compute the same sizes and
// weights as the out kernels. The result keeps the input's memory format
// (channels_last in, channels_last out).
torch::stable::Tensor aten_resize_bilinear(const torch::stable::Tensor& input, int64_t out_height,
                                           int64_t out_width, bool antialias) {
  using torch::stable::detail::from;
  const std::vector<int64_t> size{out_height, out_width};
  std::array<StableIValue, 4> stack{
      from(input), from(std::optional<torch::headeronly::IntHeaderOnlyArrayRef>(size)), from(false),
      from(std::optional<double>())};
  const char* name = antialias ? "aten::_upsample_bilinear2d_aa" : "aten::upsample_bilinear2d";
  TORCH_ERROR_CODE_CHECK(torch_call_dispatcher(name, "vec", stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<torch::stable::Tensor>(stack[0]);
}

}  // namespace
