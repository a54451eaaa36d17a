// A rectangle of a whole image's bilinear resize, decoding only the pixels
// its filter taps read: the evaluation recipe Resize(N) + CenterCrop(M)
// fused into one window decode, bit for bit what torchvision's
// decode_jpeg + resize + crop gives (grid_resample.h says why it is exact).
//
// Torch-free, like the rest of the core.
#pragma once

#include <cstdint>
#include <vector>

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
  const int64_t out_pixels = crop.rect.height * crop.rect.width;
  Status status = decoder->reserve_memory(
      channels * (span.height * span.width + span.height * crop.rect.width + out_pixels) +
      static_cast<int64_t>(sizeof(int32_t)) * channels * crop.rect.width);
  if (!status.ok()) {
    return status;
  }
  std::vector<uint8_t> pixels(static_cast<size_t>(span.height * span.width) * channels);
  status = decoder->decode(span, mode, pixels.data(), PixelOrder::kInterleaved);
  if (!status.ok()) {
    return status;
  }
  if (order == PixelOrder::kInterleaved || channels == 1) {
    resample_grid(pixels.data(), channels, taps_y, taps_x, out);
    return status;
  }
  std::vector<uint8_t> interleaved(static_cast<size_t>(out_pixels) * channels);
  resample_grid(pixels.data(), channels, taps_y, taps_x, interleaved.data());
  for (int c = 0; c < channels; ++c) {
    uint8_t* plane = out + static_cast<size_t>(c) * out_pixels;
    for (int64_t p = 0; p < out_pixels; ++p) {
      plane[p] = interleaved[static_cast<size_t>(p) * channels + c];
    }
  }
  return status;
}

}  // namespace custom_op
