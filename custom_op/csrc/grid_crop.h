// A rectangle of a whole image's bilinear resize, decoding only the pixels
// its filter taps read: the evaluation recipe Resize(N) + CenterCrop(M)
// fused into one window decode, bit for bit what torchvision's
// decode_jpeg + resize + crop gives (grid_resample.h says why it is exact).
//
// Torch-free, like the rest of the core.
#pragma once

#include <cstdint>
#include <memory>

#include "grid_resample.h"
#include "jpeg_decoder.h"

namespace custom_op {

// `rect` of the image resized to grid_height x grid_width.
struct GridCrop {
  int64_t grid_height = 0;
  int64_t grid_width = 0;
  Window rect;
  bool antialias = true;
};

// Whether `crop` is a non-empty rectangle inside its grid.
inline bool grid_crop_fits(const GridCrop& crop) {
  return crop.grid_height >= 1 && crop.grid_width >= 1 &&
         window_fits(crop.rect, crop.grid_height, crop.grid_width);
}

// Decodes the input span of `crop`'s taps at full scale and resamples it into
// `out` (output_channels(info, mode) channels, rect.height x rect.width, in
// `order`). Call after read_header.
inline Status decode_grid_crop(JpegDecoder* decoder, const JpegInfo& info, const GridCrop& crop,
                               ColorMode mode, PixelOrder order, uint8_t* out) {
  if (!grid_crop_fits(crop)) {
    return Status{StatusCode::kInvalidArgument,
                  "the rectangle does not fit in its resize grid (this is a bug in custom_op)"};
  }
  const GridTaps taps_y = grid_taps(info.height, crop.grid_height, crop.rect.y, crop.rect.height,
                                    crop.antialias);
  const GridTaps taps_x = grid_taps(info.width, crop.grid_width, crop.rect.x, crop.rect.width,
                                    crop.antialias);
  const Window span{taps_y.in_first, taps_x.in_first, taps_y.in_end - taps_y.in_first,
                    taps_x.in_end - taps_x.in_first};
  const int channels = output_channels(info, mode);
  // Colour is resampled as RGBX: 4-byte pixels are one vector of 4 sums (the
  // fourth byte is dropped when writing).
  const bool rgbx = decoder->has_rgbx_rows(mode);
  const int pixel_bytes = rgbx ? 4 : channels;
  const int64_t out_pixels = crop.rect.height * crop.rect.width;
  Status status = decoder->reserve_memory(
      pixel_bytes * (span.height * span.width + span.height * crop.rect.width + out_pixels) +
      static_cast<int64_t>(sizeof(int32_t)) * pixel_bytes * crop.rect.width);
  if (!status.ok()) {
    return status;
  }
  // Buffers every byte of which is written before it is read: not zeroed first
  // (zeroing the window's pixels alone cost 5% of the whole call).
  const std::unique_ptr<uint8_t[]> pixels(
      new uint8_t[static_cast<size_t>(span.height * span.width) * pixel_bytes]);
  status = rgbx ? decoder->decode_rgbx(span, mode, pixels.get())
                : decoder->decode(span, mode, pixels.get(), PixelOrder::kInterleaved);
  if (!status.ok()) {
    return status;
  }
  if (!rgbx && (order == PixelOrder::kInterleaved || channels == 1)) {
    resample_grid(pixels.get(), channels, taps_y, taps_x, out);
    return status;
  }
  const std::unique_ptr<uint8_t[]> resampled(new uint8_t[static_cast<size_t>(out_pixels) * pixel_bytes]);
  resample_grid(pixels.get(), pixel_bytes, taps_y, taps_x, resampled.get());
  if (!rgbx) {  // Planar output of several channels that are not RGBX: split the planes.
    for (int c = 0; c < channels; ++c) {
      uint8_t* plane = out + static_cast<size_t>(c) * out_pixels;
      for (int64_t p = 0; p < out_pixels; ++p) {
        plane[p] = resampled.get()[static_cast<size_t>(p) * channels + c];
      }
    }
    return status;
  }
  const size_t row_step = order == PixelOrder::kPlanar ? static_cast<size_t>(crop.rect.width)
                                                       : static_cast<size_t>(crop.rect.width) * channels;
  for (int64_t row = 0; row < crop.rect.height; ++row) {
    detail::emit_row(resampled.get() + static_cast<size_t>(row * crop.rect.width) * pixel_bytes,
                     detail::RowLayout::kRgbx, static_cast<int>(crop.rect.width), channels, order,
                     out + static_cast<size_t>(row) * row_step, static_cast<size_t>(out_pixels));
  }
  return status;
}

}  // namespace custom_op
