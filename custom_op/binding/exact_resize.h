// The exact resize of a window (no DCT scaling): the crop decoded at full
// scale and resized by the very ATen kernel torchvision's resize runs on
// uint8 CPU tensors (aten_resize_bilinear), so the result equals torchvision's
// resized_crop of a full decode. Included only through binding/window_decode.h
// into decode_and_crop_jpeg.cpp, the extension's one translation unit, hence the anonymous namespace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "binding/aten_calls.h"
#include "binding/stable_tensors.h"
#include "csrc/jpeg_decoder.h"

namespace {

// What a resized decode needs besides the bytes and the window.
struct ResizeRequest {
  int64_t out_height;
  int64_t out_width;
  int scale_num;
  bool antialias;
};

// The resize of a colour window, on libjpeg's RGBX rows. ATen's uint8 kernel
// works on 4-byte pixels: given CHW planes it unpacks them to RGBA and packs
// its result back byte by byte, after the core split libjpeg's rows into
// those planes. Handed the rows as a channels_last [1, 4, H, W] tensor, it
// skips all three copies. It resizes each channel on its own with the same weights either
// way, so R, G and B come out bit for bit as from the planes; the fourth
// channel is dropped.
custom_op::Status resize_rgbx(custom_op::JpegDecoder* decoder, const custom_op::Window& window,
                              custom_op::ColorMode mode, const ResizeRequest& resize,
                              custom_op::PixelOrder order, const Tensor& target) {
  const custom_op::Status within_limits = decoder->reserve_memory(
      4 * (window.height * window.width + resize.out_height * resize.out_width));
  if (!within_limits.ok()) {
    return within_limits;
  }
  const Tensor rows = empty_bytes({1, window.height, window.width, 4});
  custom_op::Status status = decoder->decode_rgbx(window, mode, bytes_of(rows));
  if (!status.ok()) {
    return status;
  }
  Tensor resized = aten_resize_bilinear(aten_permute(rows, {0, 3, 1, 2}), resize.out_height,
                                         resize.out_width, resize.antialias);
  if (!is_channels_last(resized)) {  // ATen keeps channels_last today; copy if it ever does not
    Tensor packed = aten_permute(empty_bytes({1, resize.out_height, resize.out_width, 4}), {0, 3, 1, 2});
    torch::stable::copy_(packed, resized);
    resized = packed;
  }
  const uint8_t* pixels = bytes_of(resized);
  uint8_t* out = bytes_of(target);
  const size_t plane_size = static_cast<size_t>(resize.out_height * resize.out_width);
  const size_t row_step = order == custom_op::PixelOrder::kPlanar ? resize.out_width : resize.out_width * 3;
  for (int64_t row = 0; row < resize.out_height; ++row) {
    custom_op::detail::emit_row(pixels + row * resize.out_width * 4, custom_op::detail::RowLayout::kRgbx,
                                static_cast<int>(resize.out_width), /*out_channels=*/3, order,
                                out + row * row_step, plane_size);
  }
  return status;
}

// Without DCT scaling: the exact crop, resized by ATen's kernel (see
// aten_resize_bilinear), so the result equals torchvision's resized_crop of a
// full decode, and costs less than the core's portable resampler (which
// serves the reduced scales, where the box has fractional edges that ATen
// cannot take). The crop goes to ATen as fresh channels_last memory, the
// layout torchvision resizes decode_jpeg's output in, whatever `order` the
// result has: every layout gives the same pixels, but contiguous 3-channel
// planes resized to 1 x 1 fail an internal assert in ATen's uint8 kernel
// (CMYK files in "rgb" mode take this path, colour files resize_rgbx).
custom_op::Status decode_then_resize(custom_op::JpegDecoder* decoder, const custom_op::Window& window,
                                     custom_op::ColorMode mode, int64_t channels,
                                     const ResizeRequest& resize, custom_op::PixelOrder order,
                                     const std::optional<Tensor>& into, Tensor* out) {
  // torchvision returns the input itself for an identity resize.
  if (resize.out_height == window.height && resize.out_width == window.width) {
    *out = output_tensor(into, channels, window.height, window.width, order);
    return decoder->decode(window, mode, bytes_of(*out), order);
  }
  if (decoder->has_rgbx_rows(mode)) {
    *out = output_tensor(into, channels, resize.out_height, resize.out_width, order);
    return resize_rgbx(decoder, window, mode, resize, order, *out);
  }
  const custom_op::Status within_limits = decoder->reserve_memory(channels * window.height * window.width);
  if (!within_limits.ok()) {
    return within_limits;
  }
  const Tensor rows = empty_bytes({1, window.height, window.width, channels});
  const custom_op::Status status =
      decoder->decode(window, mode, bytes_of(rows), custom_op::PixelOrder::kInterleaved);
  if (!status.ok()) {
    return status;
  }
  *out = output_tensor(into, channels, resize.out_height, resize.out_width, order);
  Tensor target = torch::stable::unsqueeze(*out, 0);
  torch::stable::copy_(target, aten_resize_bilinear(aten_permute(rows, {0, 3, 1, 2}),
                                                    resize.out_height, resize.out_width,
                                                    resize.antialias));
  return status;
}

}  // namespace
