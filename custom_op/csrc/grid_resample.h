// Bilinear resampling of uint8 pixels that gives, bit for bit, any rectangle
// of the output of ATen's uint8 CPU kernels
// (torch.nn.functional.interpolate(mode="bilinear", align_corners=False),
// with antialias=True or False), which torchvision's resize runs on uint8
// images. ATen resizes a whole image; a centre crop of its result needs only
// the crop's rectangle of the output grid, and that rectangle needs only the
// input samples its filter taps reach. Computing the taps of the rectangle
// exactly as ATen computes them for the whole grid lets a caller decode only
// those samples (the evaluation recipe Resize(N) + CenterCrop(M)).
//
// ATen's recipe, per axis: the weights are computed in double (the triangle
// filter, widened by the shrink factor when antialiasing, normalised per
// output sample), then rescaled to int16 with a precision chosen from the
// largest weight of the *whole* grid; each pass (fixed_point_passes.h) sums
// uint8 x int16 products in int32, adds half an LSB, shifts and clamps to
// uint8. The width pass runs first and rounds to uint8 before the height
// pass. An axis whose size does
// not change is not resampled at all. All of it is integer arithmetic after
// the weights, so the order of the sums does not matter: only the weights,
// the bounds and the precision must match, and the tests compare with
// torchvision at many sizes to hold them to it.
//
// Torch-free, like the rest of the core.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fixed_point_passes.h"

namespace custom_op {

namespace detail {

inline double triangle_filter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// ATen's double weights of output sample i (antialiased: the filter widened by
// the shrink factor, spanning [first, first + count)); returns their maximum.
inline double antialiased_weights(int64_t i, int64_t in_size, double scale, int max_taps,
                                  double* w, int64_t* first, int64_t* count) {
  const double support = scale >= 1.0 ? scale : 1.0;
  const double center = scale * (static_cast<double>(i) + 0.5);
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  const int64_t lo = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
  int64_t size = std::min(static_cast<int64_t>(center + support + 0.5), in_size) - lo;
  size = std::clamp(size, int64_t{0}, static_cast<int64_t>(max_taps));
  double total = 0.0;
  for (int64_t j = 0; j < size; ++j) {
    w[j] = triangle_filter((static_cast<double>(j + lo) - center + 0.5) * invscale);
    total += w[j];
  }
  double largest = 0.0;
  if (total != 0.0) {
    for (int64_t j = 0; j < size; ++j) {
      w[j] /= total;
      largest = std::max(largest, w[j]);
    }
  }
  std::fill(w + size, w + max_taps, 0.0);
  *first = lo;
  *count = size;
  return largest;
}

// ATen's double weights of output sample i for plain bilinear interpolation
// (two taps; weights of taps past an edge fold onto the edge sample).
inline double bilinear_weights(int64_t i, int64_t in_size, double scale, double* w,
                               int64_t* first, int64_t* count) {
  double real = scale * (static_cast<double>(i) + 0.5) - 0.5;
  real = real < 0.0 ? 0.0 : real;
  // ATen floors in single precision here (floorf on the double index).
  const int64_t index = std::min(static_cast<int64_t>(std::floor(static_cast<float>(real))),
                                 in_size - 1);
  const double lambda = std::min(std::max(real - static_cast<double>(index), 0.0), 1.0);
  const int64_t lo = std::max(index, int64_t{0});
  const int64_t size = std::clamp(std::min(index + 2, in_size) - lo, int64_t{0}, int64_t{2});
  double largest = 0.0;
  int slot = 0;
  for (int j = 0; j < 2; ++j) {
    w[j] = 0.0;
    const double weight = triangle_filter(static_cast<double>(j) - lambda);
    if (index + j <= 0) {
      slot = 0;
    } else if (index + j >= in_size - 1) {
      slot = static_cast<int>(size) - 1;
    }
    w[slot] += weight;
    largest = std::max(largest, w[slot]);
    ++slot;
  }
  *first = lo;
  *count = size;
  return largest;
}

}  // namespace detail

// The taps of output samples [out_first, out_first + out_count) of the
// in_size -> out_size axis. Needs 1 <= out_count, out_first + out_count <= out_size.
inline GridTaps grid_taps(int64_t in_size, int64_t out_size, int64_t out_first, int64_t out_count,
                          bool antialias) {
  GridTaps taps;
  if (in_size == out_size) {
    taps.identity = true;
    taps.in_first = out_first;
    taps.in_end = out_first + out_count;
    return taps;
  }
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const int max_taps = antialias ? static_cast<int>(std::ceil(scale >= 1.0 ? scale : 1.0)) * 2 + 1 : 2;
  std::vector<double> weights(static_cast<size_t>(max_taps));
  std::vector<double> kept(static_cast<size_t>(out_count) * max_taps);
  std::vector<int64_t> firsts(static_cast<size_t>(out_count));
  taps.count.resize(static_cast<size_t>(out_count));
  // The precision depends on the largest weight of the whole grid, so every
  // output sample's weights are computed, and the rectangle's are kept.
  double largest = 0.0;
  for (int64_t i = 0; i < out_size; ++i) {
    const bool wanted = i >= out_first && i < out_first + out_count;
    double* w = wanted ? &kept[static_cast<size_t>(i - out_first) * max_taps] : weights.data();
    int64_t first = 0;
    int64_t count = 0;
    largest = std::max(largest, antialias ? detail::antialiased_weights(i, in_size, scale, max_taps,
                                                                        w, &first, &count)
                                          : detail::bilinear_weights(i, in_size, scale, w, &first,
                                                                     &count));
    if (wanted) {
      firsts[static_cast<size_t>(i - out_first)] = first;
      taps.count[static_cast<size_t>(i - out_first)] = static_cast<int>(count);
    }
  }
  const int precision = detail::fixed_precision(largest);
  taps.precision = precision;
  taps.max_taps = max_taps;
  taps.in_first = in_size;
  taps.in_end = 0;
  for (int64_t k = 0; k < out_count; ++k) {
    taps.in_first = std::min(taps.in_first, firsts[static_cast<size_t>(k)]);
    taps.in_end = std::max(taps.in_end, firsts[static_cast<size_t>(k)] + taps.count[static_cast<size_t>(k)]);
  }
  taps.in_end = std::max(taps.in_end, taps.in_first + 1);
  taps.first.resize(static_cast<size_t>(out_count));
  taps.weights.resize(kept.size());
  for (int64_t k = 0; k < out_count; ++k) {
    taps.first[static_cast<size_t>(k)] = firsts[static_cast<size_t>(k)] - taps.in_first;
  }
  for (size_t k = 0; k < kept.size(); ++k) {
    taps.weights[k] = detail::to_fixed(kept[k], precision);
  }
  return taps;
}

// Resamples `in` (the input span of taps_y rows by the input span of taps_x
// columns, `channels` (1, 3 or 4) interleaved bytes per pixel) into `out`
// (taps_y.first.size() rows by taps_x.first.size() columns, interleaved):
// width first, rounded to uint8, then height, as ATen does.
inline void resample_grid(const uint8_t* in, int channels, const GridTaps& taps_y,
                          const GridTaps& taps_x, uint8_t* out) {
  const int64_t in_rows = taps_y.in_end - taps_y.in_first;
  const int64_t in_cols = taps_x.in_end - taps_x.in_first;
  const int64_t out_cols = taps_x.identity ? in_cols : static_cast<int64_t>(taps_x.first.size());
  const size_t in_row_bytes = static_cast<size_t>(in_cols) * channels;
  const size_t out_row_bytes = static_cast<size_t>(out_cols) * channels;
  std::unique_ptr<uint8_t[]> widened;  // Written in full before it is read: not zeroed.
  const uint8_t* rows = in;
  if (!taps_x.identity) {
    widened.reset(new uint8_t[static_cast<size_t>(in_rows) * out_row_bytes]);
    detail::resample_rows_fixed(in, in_row_bytes, in_rows, channels, taps_x, widened.get(),
                                out_row_bytes);
    rows = widened.get();
  }
  if (taps_y.identity) {
    std::copy(rows, rows + static_cast<size_t>(in_rows) * out_row_bytes, out);
    return;
  }
  detail::resample_columns_fixed(rows, out_row_bytes, taps_y, out);
}

}  // namespace custom_op
