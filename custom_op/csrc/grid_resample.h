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
// largest weight of the *whole* grid; each pass sums uint8 x int16 products
// in int32, adds half an LSB, shifts and clamps to uint8. The width pass runs
// first and rounds to uint8 before the height pass. An axis whose size does
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
#include <cstring>
#include <memory>
#include <vector>

#if defined(__SSE2__) && defined(__x86_64__)  // _mm_cvtsi64_si128 is 64-bit only
#include <emmintrin.h>
#endif

// The two passes are integer multiply-adds that the compiler vectorises well
// with AVX2 (8 int32 lanes, a 32-bit multiply) and poorly with the SSE2 that
// x86-64 guarantees. GCC builds both and picks one when the library loads
// (an ifunc), where that exists; elsewhere the baseline build serves.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define CUSTOM_OP_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CUSTOM_OP_AVX2_CLONES
#endif

namespace custom_op {

// The integer taps of output samples [out_first, out_first + out_count) of an
// axis resized from in_size to out_size, and the input span they read.
struct GridTaps {
  bool identity = false;   // in_size == out_size: ATen copies this axis.
  int64_t in_first = 0;    // The first input sample any tap reads...
  int64_t in_end = 0;      // ...and one past the last.
  std::vector<int64_t> first;  // Per output sample, relative to in_first.
  std::vector<int> count;
  std::vector<int32_t> weights;  // max_taps per output sample (int16 values).
  int max_taps = 0;
  int precision = 0;
};

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

// Rounds like ATen's int16 rescale (half away from zero).
inline int32_t to_fixed(double weight, int precision) {
  const double v = weight * static_cast<double>(1 << precision);
  return static_cast<int32_t>(v < 0 ? -0.5 + v : 0.5 + v);
}

// ATen's precision for int16 weights whose largest is `largest` (at most 1):
// as many fraction bits as keep twice that weight below 2^15.
inline int fixed_precision(double largest) {
  int precision = 0;
  for (; precision < 22; ++precision) {
    if (static_cast<int>(0.5 + largest * (1 << (precision + 1))) >= (1 << 15)) {
      break;
    }
  }
  return precision;
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

namespace detail {

inline uint8_t fixed_to_byte(int32_t sum, int precision) {
  const int32_t value = sum >> precision;
  return static_cast<uint8_t>(value < 0 ? 0 : (value > 255 ? 255 : value));
}

// One row of `Channels`-interleaved pixels resampled along the row.
template <int Channels>
inline void resample_row_fixed(const uint8_t* in, const GridTaps& taps, uint8_t* out) {
  const size_t outputs = taps.first.size();
  const int32_t half = 1 << (taps.precision - 1);
  for (size_t i = 0; i < outputs; ++i) {
    const uint8_t* src = in + static_cast<size_t>(taps.first[i]) * Channels;
    const int32_t* w = &taps.weights[i * taps.max_taps];
    int32_t sum[Channels];
    for (int c = 0; c < Channels; ++c) {
      sum[c] = half;
    }
    for (int j = 0; j < taps.count[i]; ++j) {
      for (int c = 0; c < Channels; ++c) {
        sum[c] += w[j] * src[j * Channels + c];
      }
    }
    for (int c = 0; c < Channels; ++c) {
      out[i * Channels + c] = fixed_to_byte(sum[c], taps.precision);
    }
  }
}

#if defined(__SSE2__) && defined(__x86_64__)  // _mm_cvtsi64_si128 is 64-bit only
// resample_row_fixed<4> with SSE2, which every x86-64 has: two taps at a
// time, their pixels' bytes interleaved into int16 pairs that one
// multiply-add (pmaddwd) weighs and sums into the four channels' int32 sums.
// The compiler does not find this on its own (1.2 ms -> 0.3 ms for a 224
// wide row set of 470 rows).
inline void resample_row_rgbx_sse2(const uint8_t* in, const GridTaps& taps, uint8_t* out) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i half = _mm_set1_epi32(1 << (taps.precision - 1));
  const __m128i shift = _mm_cvtsi32_si128(taps.precision);
  for (size_t i = 0; i < taps.first.size(); ++i) {
    const uint8_t* src = in + static_cast<size_t>(taps.first[i]) * 4;
    const int32_t* w = &taps.weights[i * taps.max_taps];
    const int count = taps.count[i];
    __m128i sum = half;
    int j = 0;
    for (; j + 1 < count; j += 2) {
      int32_t first_pixel;
      int32_t second_pixel;
      std::memcpy(&first_pixel, src + 4 * j, 4);
      std::memcpy(&second_pixel, src + 4 * j + 4, 4);
      const __m128i pair = _mm_unpacklo_epi8(
          _mm_unpacklo_epi8(_mm_cvtsi32_si128(first_pixel), _mm_cvtsi32_si128(second_pixel)), zero);
      const __m128i weights = _mm_set1_epi32(static_cast<int32_t>(
          (static_cast<uint32_t>(w[j]) & 0xffffu) | (static_cast<uint32_t>(w[j + 1]) << 16)));
      sum = _mm_add_epi32(sum, _mm_madd_epi16(pair, weights));
    }
    if (j < count) {
      int32_t pixel;
      std::memcpy(&pixel, src + 4 * j, 4);
      const __m128i single = _mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(pixel), zero), zero);
      sum = _mm_add_epi32(sum, _mm_madd_epi16(single, _mm_set1_epi32(w[j] & 0xffff)));
    }
    // Arithmetic shift, then saturation to int16 and to uint8: the clamp to 0..255.
    const __m128i shifted = _mm_sra_epi32(sum, shift);
    const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(shifted, zero), zero);
    const int32_t result = _mm_cvtsi128_si32(bytes);
    std::memcpy(out + i * 4, &result, 4);
  }
}

// Two rows at once (`in` and `in + in_row_bytes`, into `out` and
// `out + out_row_bytes`): each tap pair's weights are set up once for both.
inline void resample_two_rows_rgbx_sse2(const uint8_t* in, size_t in_row_bytes,
                                        const GridTaps& taps, uint8_t* out, size_t out_row_bytes) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i half = _mm_set1_epi32(1 << (taps.precision - 1));
  const __m128i shift = _mm_cvtsi32_si128(taps.precision);
  for (size_t i = 0; i < taps.first.size(); ++i) {
    const uint8_t* upper = in + static_cast<size_t>(taps.first[i]) * 4;
    const uint8_t* lower = upper + in_row_bytes;
    const int32_t* w = &taps.weights[i * taps.max_taps];
    const int count = taps.count[i];
    __m128i upper_sum = half;
    __m128i lower_sum = half;
    int j = 0;
    for (; j + 1 < count; j += 2) {
      int64_t upper_pixels;
      int64_t lower_pixels;
      std::memcpy(&upper_pixels, upper + 4 * j, 8);
      std::memcpy(&lower_pixels, lower + 4 * j, 8);
      const __m128i weights = _mm_set1_epi32(static_cast<int32_t>(
          (static_cast<uint32_t>(w[j]) & 0xffffu) | (static_cast<uint32_t>(w[j + 1]) << 16)));
      // Pixels p, q as bytes p0..p3 q0..q3 -> int16 pairs (p0 q0) (p1 q1) (p2 q2) (p3 q3).
      const __m128i upper_bytes = _mm_cvtsi64_si128(upper_pixels);
      const __m128i lower_bytes = _mm_cvtsi64_si128(lower_pixels);
      const __m128i upper_pair = _mm_unpacklo_epi8(
          _mm_unpacklo_epi8(upper_bytes, _mm_srli_si128(upper_bytes, 4)), zero);
      const __m128i lower_pair = _mm_unpacklo_epi8(
          _mm_unpacklo_epi8(lower_bytes, _mm_srli_si128(lower_bytes, 4)), zero);
      upper_sum = _mm_add_epi32(upper_sum, _mm_madd_epi16(upper_pair, weights));
      lower_sum = _mm_add_epi32(lower_sum, _mm_madd_epi16(lower_pair, weights));
    }
    if (j < count) {
      int32_t upper_pixel;
      int32_t lower_pixel;
      std::memcpy(&upper_pixel, upper + 4 * j, 4);
      std::memcpy(&lower_pixel, lower + 4 * j, 4);
      const __m128i weight = _mm_set1_epi32(w[j] & 0xffff);
      upper_sum = _mm_add_epi32(upper_sum, _mm_madd_epi16(_mm_unpacklo_epi16(
          _mm_unpacklo_epi8(_mm_cvtsi32_si128(upper_pixel), zero), zero), weight));
      lower_sum = _mm_add_epi32(lower_sum, _mm_madd_epi16(_mm_unpacklo_epi16(
          _mm_unpacklo_epi8(_mm_cvtsi32_si128(lower_pixel), zero), zero), weight));
    }
    // Both rows' sums shifted, then saturated to int16 and uint8 together.
    const __m128i both = _mm_packs_epi32(_mm_sra_epi32(upper_sum, shift), _mm_sra_epi32(lower_sum, shift));
    const __m128i bytes = _mm_packus_epi16(both, zero);
    const int32_t upper_result = _mm_cvtsi128_si32(bytes);
    const int32_t lower_result = _mm_cvtsi128_si32(_mm_srli_si128(bytes, 4));
    std::memcpy(out + i * 4, &upper_result, 4);
    std::memcpy(out + out_row_bytes + i * 4, &lower_result, 4);
  }
}
#endif

// The width pass over `rows` rows, for 1, 3 or 4 bytes per pixel.
CUSTOM_OP_AVX2_CLONES
static void resample_rows_fixed(const uint8_t* in, size_t in_row_bytes, int64_t rows, int channels,
                                const GridTaps& taps, uint8_t* out, size_t out_row_bytes) {
  int64_t r = 0;
#if defined(__SSE2__) && defined(__x86_64__)  // _mm_cvtsi64_si128 is 64-bit only
  for (; channels == 4 && r + 1 < rows; r += 2) {
    resample_two_rows_rgbx_sse2(in + static_cast<size_t>(r) * in_row_bytes, in_row_bytes, taps,
                                out + static_cast<size_t>(r) * out_row_bytes, out_row_bytes);
  }
#endif
  for (; r < rows; ++r) {
    const uint8_t* src = in + static_cast<size_t>(r) * in_row_bytes;
    uint8_t* dst = out + static_cast<size_t>(r) * out_row_bytes;
    switch (channels) {
      case 1: resample_row_fixed<1>(src, taps, dst); break;
      case 3: resample_row_fixed<3>(src, taps, dst); break;
      default:
#if defined(__SSE2__) && defined(__x86_64__)  // _mm_cvtsi64_si128 is 64-bit only
        resample_row_rgbx_sse2(src, taps, dst);
#else
        resample_row_fixed<4>(src, taps, dst);
#endif
        break;
    }
  }
}

// Output rows from `rows` (row_bytes bytes each, the taps' input rows).
CUSTOM_OP_AVX2_CLONES
static void resample_columns_fixed(const uint8_t* rows, size_t row_bytes, const GridTaps& taps,
                                   uint8_t* out, std::vector<int32_t>* scratch) {
  const int32_t half = 1 << (taps.precision - 1);
  scratch->resize(row_bytes);
  int32_t* acc = scratch->data();
  for (size_t i = 0; i < taps.first.size(); ++i) {
    std::fill(acc, acc + row_bytes, half);
    const int32_t* w = &taps.weights[i * taps.max_taps];
    for (int j = 0; j < taps.count[i]; ++j) {
      const uint8_t* src = rows + static_cast<size_t>(taps.first[i] + j) * row_bytes;
      const int32_t weight = w[j];
      for (size_t x = 0; x < row_bytes; ++x) {
        acc[x] += weight * src[x];
      }
    }
    uint8_t* dst = out + i * row_bytes;
    for (size_t x = 0; x < row_bytes; ++x) {
      dst[x] = fixed_to_byte(acc[x], taps.precision);
    }
  }
}

}  // namespace detail

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
  std::vector<int32_t> scratch;
  detail::resample_columns_fixed(rows, out_row_bytes, taps_y, out, &scratch);
}

}  // namespace custom_op
