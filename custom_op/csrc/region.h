// Region arithmetic: the window a caller asks for, whether it fits in the
// image, the wider region libjpeg must decode so that the window's edge
// columns equal a full decode's, and windows mapped to a reduced DCT scale.
//
// Plain integer arithmetic on int64 values, with no libjpeg call and no
// pixel: it must stay that way, so that every rule about which columns and
// rows are decoded lives here and nowhere else. Sums of values that come
// from a caller are formed only after the checks that keep them in range.
#pragma once

#include <algorithm>
#include <cstdint>

namespace custom_op {

// A window of the image, in pixels of the full-size image.
struct Window {
  int64_t y = 0;
  int64_t x = 0;
  int64_t height = 0;
  int64_t width = 0;
};

// A box with fractional edges inside a Window, relative to its top-left
// corner, in pixels of the full-size image: the part of the image that a
// rectangle of a whole image's resize covers.
struct BoxInWindow {
  double y = 0.0;
  double x = 0.0;
  double height = 0.0;
  double width = 0.0;
};

// Whether `w` is non-empty and lies inside a height x width image.
inline bool window_fits(const Window& w, int64_t height, int64_t width) {
  return w.y >= 0 && w.x >= 0 && w.height >= 1 && w.width >= 1 && w.y < height && w.x < width &&
         w.height <= height - w.y && w.width <= width - w.x;
}

namespace detail {

// The columns [x, x + width) that libjpeg must decode so that every column of
// `window` equals the same column of a full decode.
//
// With horizontal chroma subsampling, libjpeg's default ("fancy") upsampling
// computes each output column from its chroma sample and that sample's
// neighbour. jpeg_crop_scanline makes the decoded region's edges behave like
// image edges (the neighbour is replaced by a copy), so the region's first and
// last columns differ from a full decode. Widening the region by one column
// on each side that is not an image edge pushes those columns outside the
// window. The region must also keep at least two chroma samples per row, or
// jpeg_crop_scanline switches to plain replication for very narrow crops.
//
// Progressive files whose scans stop early (valid, or truncated and decoded
// with strict=False) get libjpeg's block smoothing, which estimates missing
// coefficients from a 5 x 5 neighbourhood of DC values. libjpeg-turbo starts
// that neighbourhood at the region's first block column, as if it were the
// image's left edge, so two more iMCU columns on the left are needed there.
struct Region {
  int64_t x = 0;
  int64_t width = 0;
};

struct RegionInputs {
  int64_t image_width;    // Of the image as decoded (at its DCT scale).
  int max_h_samp_factor;
  int64_t imcu_width;     // Pixels per iMCU column as decoded.
  bool progressive;
  bool exact_edges;
};

inline Region region_for(const RegionInputs& in, const Window& window) {
  int64_t left = window.x;
  int64_t right = window.x + window.width;
  if (in.exact_edges && in.max_h_samp_factor > 1) {
    left = left > 0 ? left - 1 : 0;
    right = right < in.image_width ? right + 1 : right;
    const int64_t min_width = 2 * static_cast<int64_t>(in.max_h_samp_factor) + 1;
    if (right - left < min_width) {
      right = left + min_width < in.image_width ? left + min_width : in.image_width;
      left = right - min_width > 0 ? right - min_width : 0;
    }
  }
  if (in.exact_edges && in.progressive) {
    left = std::max<int64_t>(0, left - 2 * in.imcu_width);
  }
  return Region{left, right - left};
}

// libjpeg's size of a dimension decoded at scale_num / 8 (jdiv_round_up).
inline int64_t scaled_dimension(int64_t full, int scale_num) {
  return (full * scale_num + 7) / 8;
}

// The smallest window of the image decoded at scale_num / 8 that covers
// `window` (given in full-size pixels).
inline Window scaled_window(const Window& window, int scale_num, int64_t scaled_height,
                            int64_t scaled_width) {
  const int64_t top = window.y * scale_num / 8;
  const int64_t left = window.x * scale_num / 8;
  const int64_t bottom = std::min<int64_t>((window.y + window.height) * scale_num + 7, scaled_height * 8) / 8;
  const int64_t right = std::min<int64_t>((window.x + window.width) * scale_num + 7, scaled_width * 8) / 8;
  return Window{top, left, std::max<int64_t>(bottom - top, 1), std::max<int64_t>(right - left, 1)};
}

}  // namespace detail
}  // namespace custom_op
