// The two passes of a separable resize of uint8 pixels in fixed point, as
// ATen's uint8 CPU kernels compute them: int16 weights, uint8 x int16
// products summed in int32 with half an LSB, shifted by the weights'
// precision and clamped to uint8; the width pass first, rounded to uint8,
// then the height pass. Every resize of the core runs them: the exact grid
// crop (grid_resample.h) and the reduced DCT scales (resample.h).
//
// Each pass has a portable version, an SSE2 one (what every x86-64 has) and
// an AVX2 one, and the best one the CPU runs is picked once. Integer sums do
// not depend on their order, so all three give the same bytes
// (fuzz/core_test.cc compares them on every run). Both SIMD versions weigh two taps
// with one multiply-add (pmaddwd) of interleaved int16 pairs, the trick ATen's
// own AVX2 kernels use: the width pass pairs two neighbouring pixels of a row,
// the height pass two rows; the AVX2 width pass does four rows at a time.
// Resize(256) + CenterCrop(224) of a 375 x 500 file, the passes' share on an
// AVX2 Xeon: 0.183 ms with the former SSE2 width pass and compiler-vectorised
// height pass, 0.102 ms with these AVX2 ones (0.166 ms SSE2, 0.60 portable).
//
// Torch-free, like the rest of the core.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CUSTOM_OP_X86_KERNELS 1
#include <immintrin.h>
#else
#define CUSTOM_OP_X86_KERNELS 0
#endif

namespace custom_op {

// The integer taps of output samples [out_first, out_first + out_count) of an
// axis, and the input span they read.
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

// Which versions of the passes run.
enum class KernelLevel { kPortable, kSse2, kAvx2 };

// The best level this CPU runs, asked once.
inline KernelLevel best_kernel_level() {
#if CUSTOM_OP_X86_KERNELS
  static const KernelLevel level =
      __builtin_cpu_supports("avx2") ? KernelLevel::kAvx2 : KernelLevel::kSse2;
  return level;
#else
  return KernelLevel::kPortable;
#endif
}

namespace detail {

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

inline uint8_t fixed_to_byte(int32_t sum, int precision) {
  const int32_t value = sum >> precision;
  return static_cast<uint8_t>(value < 0 ? 0 : (value > 255 ? 255 : value));
}

// Two int16 weights in one int32, the low one first: pmaddwd's operand.
inline int32_t weight_pair(int32_t first, int32_t second) {
  return static_cast<int32_t>((static_cast<uint32_t>(first) & 0xffffu) |
                              (static_cast<uint32_t>(second) << 16));
}

// --- The width pass -------------------------------------------------------

// One row of `Channels`-interleaved pixels resampled along the row.
template <int Channels>
inline void resample_row_portable(const uint8_t* in, const GridTaps& taps, uint8_t* out) {
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

#if CUSTOM_OP_X86_KERNELS
// A row of 4-byte pixels, two rows at a time (`in` and `in + in_row_bytes`,
// into `out` and `out + out_row_bytes`), with SSE2: each pair of taps is one
// multiply-add of the two pixels' bytes interleaved into int16 pairs
// (p0 q0) (p1 q1) (p2 q2) (p3 q3), whose weights both rows share.
__attribute__((target("sse2")))
inline void resample_row_pair_rgbx_sse2(const uint8_t* in, size_t in_row_bytes,
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
      const __m128i weights = _mm_set1_epi32(weight_pair(w[j], w[j + 1]));
      const __m128i upper_bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(upper + 4 * j));
      const __m128i lower_bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(lower + 4 * j));
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
    // Arithmetic shift, then saturation to int16 and to uint8: the clamp to 0..255.
    const __m128i both = _mm_packs_epi32(_mm_sra_epi32(upper_sum, shift), _mm_sra_epi32(lower_sum, shift));
    const __m128i bytes = _mm_packus_epi16(both, zero);
    const int32_t upper_result = _mm_cvtsi128_si32(bytes);
    const int32_t lower_result = _mm_cvtsi128_si32(_mm_srli_si128(bytes, 4));
    std::memcpy(out + i * 4, &upper_result, 4);
    std::memcpy(out + out_row_bytes + i * 4, &lower_result, 4);
  }
}

// The same for four rows, with AVX2: rows 0 and 1 in the two 128-bit lanes of
// one register, rows 2 and 3 in another; one byte shuffle per register makes
// the int16 pairs.
__attribute__((target("avx2")))
inline void resample_row_quad_rgbx_avx2(const uint8_t* in, size_t in_row_bytes,
                                        const GridTaps& taps, uint8_t* out, size_t out_row_bytes) {
  // Per lane, bytes p0..p3 q0..q3 -> int16 (p0 q0) (p1 q1) (p2 q2) (p3 q3); -1 gives a zero.
  const __m256i pairs = _mm256_setr_epi8(0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1,
                                         0, -1, 4, -1, 1, -1, 5, -1, 2, -1, 6, -1, 3, -1, 7, -1);
  // Per lane, bytes p0..p3 -> int16 p0 0 p1 0 p2 0 p3 0 (the last tap, alone).
  const __m256i singles = _mm256_setr_epi8(0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1,
                                           0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1);
  const __m256i half = _mm256_set1_epi32(1 << (taps.precision - 1));
  const __m128i shift = _mm_cvtsi32_si128(taps.precision);
  for (size_t i = 0; i < taps.first.size(); ++i) {
    const uint8_t* row0 = in + static_cast<size_t>(taps.first[i]) * 4;
    const uint8_t* row2 = row0 + 2 * in_row_bytes;
    const int32_t* w = &taps.weights[i * taps.max_taps];
    const int count = taps.count[i];
    __m256i sum01 = half;
    __m256i sum23 = half;
    int j = 0;
    for (; j + 1 < count; j += 2) {
      const __m256i weights = _mm256_set1_epi32(weight_pair(w[j], w[j + 1]));
      const __m256i rows01 = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row0 + 4 * j))),
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row0 + in_row_bytes + 4 * j)), 1);
      const __m256i rows23 = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row2 + 4 * j))),
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row2 + in_row_bytes + 4 * j)), 1);
      sum01 = _mm256_add_epi32(sum01, _mm256_madd_epi16(_mm256_shuffle_epi8(rows01, pairs), weights));
      sum23 = _mm256_add_epi32(sum23, _mm256_madd_epi16(_mm256_shuffle_epi8(rows23, pairs), weights));
    }
    if (j < count) {
      const __m256i weight = _mm256_set1_epi32(w[j] & 0xffff);
      int32_t pixels[4];
      for (int r = 0; r < 4; ++r) {
        std::memcpy(&pixels[r], row0 + r * in_row_bytes + 4 * j, 4);
      }
      const __m256i rows01 = _mm256_setr_epi32(pixels[0], 0, 0, 0, pixels[1], 0, 0, 0);
      const __m256i rows23 = _mm256_setr_epi32(pixels[2], 0, 0, 0, pixels[3], 0, 0, 0);
      sum01 = _mm256_add_epi32(sum01, _mm256_madd_epi16(_mm256_shuffle_epi8(rows01, singles), weight));
      sum23 = _mm256_add_epi32(sum23, _mm256_madd_epi16(_mm256_shuffle_epi8(rows23, singles), weight));
    }
    // Per lane: row 0 (or 1) then row 2 (or 3), as int16, then as bytes.
    const __m256i words = _mm256_packs_epi32(_mm256_sra_epi32(sum01, shift), _mm256_sra_epi32(sum23, shift));
    const __m256i bytes = _mm256_packus_epi16(words, _mm256_setzero_si256());
    const __m128i low = _mm256_castsi256_si128(bytes);
    const __m128i high = _mm256_extracti128_si256(bytes, 1);
    const int32_t results[4] = {_mm_cvtsi128_si32(low), _mm_cvtsi128_si32(high),
                                _mm_cvtsi128_si32(_mm_srli_si128(low, 4)),
                                _mm_cvtsi128_si32(_mm_srli_si128(high, 4))};
    for (int r = 0; r < 4; ++r) {
      std::memcpy(out + r * out_row_bytes + i * 4, &results[r], 4);
    }
  }
}
#endif

// The width pass over `rows` rows, for 1, 3 or 4 bytes per pixel. The SIMD
// versions take 4-byte pixels (libjpeg's RGBX rows, and CMYK); the others run
// the portable code, which the compiler vectorises less well.
inline void resample_rows_fixed(const uint8_t* in, size_t in_row_bytes, int64_t rows, int channels,
                                const GridTaps& taps, uint8_t* out, size_t out_row_bytes,
                                KernelLevel level = best_kernel_level()) {
  int64_t r = 0;
#if !CUSTOM_OP_X86_KERNELS
  (void)level;
#else
  for (; channels == 4 && level == KernelLevel::kAvx2 && r + 3 < rows; r += 4) {
    resample_row_quad_rgbx_avx2(in + static_cast<size_t>(r) * in_row_bytes, in_row_bytes, taps,
                                out + static_cast<size_t>(r) * out_row_bytes, out_row_bytes);
  }
  for (; channels == 4 && level != KernelLevel::kPortable && r + 1 < rows; r += 2) {
    resample_row_pair_rgbx_sse2(in + static_cast<size_t>(r) * in_row_bytes, in_row_bytes, taps,
                                out + static_cast<size_t>(r) * out_row_bytes, out_row_bytes);
  }
#endif
  for (; r < rows; ++r) {
    const uint8_t* src = in + static_cast<size_t>(r) * in_row_bytes;
    uint8_t* dst = out + static_cast<size_t>(r) * out_row_bytes;
    switch (channels) {
      case 1: resample_row_portable<1>(src, taps, dst); break;
      case 3: resample_row_portable<3>(src, taps, dst); break;
      default: resample_row_portable<4>(src, taps, dst); break;
    }
  }
}

// --- The height pass ------------------------------------------------------

// Output bytes [begin, end) of output row i from `rows` (row_bytes each), a
// chunk of sums at a time, tap by tap: loops the compiler vectorises.
inline void resample_column_bytes_portable(const uint8_t* rows, size_t row_bytes, const GridTaps& taps,
                                           size_t i, size_t begin, size_t end, uint8_t* dst) {
  constexpr size_t kChunk = 64;
  const int32_t half = 1 << (taps.precision - 1);
  const int32_t* w = &taps.weights[i * taps.max_taps];
  const uint8_t* first = rows + static_cast<size_t>(taps.first[i]) * row_bytes;
  for (size_t x = begin; x < end; x += kChunk) {
    const size_t length = std::min(kChunk, end - x);
    int32_t sums[kChunk];
    std::fill(sums, sums + length, half);
    for (int j = 0; j < taps.count[i]; ++j) {
      const uint8_t* src = first + static_cast<size_t>(j) * row_bytes + x;
      for (size_t k = 0; k < length; ++k) {
        sums[k] += w[j] * src[k];
      }
    }
    for (size_t k = 0; k < length; ++k) {
      dst[x + k] = fixed_to_byte(sums[k], taps.precision);
    }
  }
}

#if CUSTOM_OP_X86_KERNELS
// Output row i from byte `begin`, 16 bytes at a time, with SSE2: each pair
// of taps is one multiply-add of the two rows' bytes interleaved into int16
// pairs. Returns where it stopped (fewer than 16 bytes before the row's end).
__attribute__((target("sse2")))
inline size_t resample_column_bytes_sse2(const uint8_t* rows, size_t row_bytes, const GridTaps& taps,
                                         size_t i, size_t begin, uint8_t* dst) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i half = _mm_set1_epi32(1 << (taps.precision - 1));
  const __m128i shift = _mm_cvtsi32_si128(taps.precision);
  const int32_t* w = &taps.weights[i * taps.max_taps];
  const int count = taps.count[i];
  const uint8_t* first = rows + static_cast<size_t>(taps.first[i]) * row_bytes;
  size_t x = begin;
  for (; x + 16 <= row_bytes; x += 16) {
    __m128i sums[4] = {half, half, half, half};
    int j = 0;
    for (; j + 1 < count; j += 2) {
      const __m128i weights = _mm_set1_epi32(weight_pair(w[j], w[j + 1]));
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(first + j * row_bytes + x));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(first + (j + 1) * row_bytes + x));
      const __m128i low = _mm_unpacklo_epi8(a, b);
      const __m128i high = _mm_unpackhi_epi8(a, b);
      sums[0] = _mm_add_epi32(sums[0], _mm_madd_epi16(_mm_unpacklo_epi8(low, zero), weights));
      sums[1] = _mm_add_epi32(sums[1], _mm_madd_epi16(_mm_unpackhi_epi8(low, zero), weights));
      sums[2] = _mm_add_epi32(sums[2], _mm_madd_epi16(_mm_unpacklo_epi8(high, zero), weights));
      sums[3] = _mm_add_epi32(sums[3], _mm_madd_epi16(_mm_unpackhi_epi8(high, zero), weights));
    }
    if (j < count) {  // The last tap alone: its bytes paired with zeros.
      const __m128i weight = _mm_set1_epi32(w[j] & 0xffff);
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(first + j * row_bytes + x));
      const __m128i low = _mm_unpacklo_epi8(a, zero);
      const __m128i high = _mm_unpackhi_epi8(a, zero);
      sums[0] = _mm_add_epi32(sums[0], _mm_madd_epi16(_mm_unpacklo_epi16(low, zero), weight));
      sums[1] = _mm_add_epi32(sums[1], _mm_madd_epi16(_mm_unpackhi_epi16(low, zero), weight));
      sums[2] = _mm_add_epi32(sums[2], _mm_madd_epi16(_mm_unpacklo_epi16(high, zero), weight));
      sums[3] = _mm_add_epi32(sums[3], _mm_madd_epi16(_mm_unpackhi_epi16(high, zero), weight));
    }
    const __m128i words_low = _mm_packs_epi32(_mm_sra_epi32(sums[0], shift), _mm_sra_epi32(sums[1], shift));
    const __m128i words_high = _mm_packs_epi32(_mm_sra_epi32(sums[2], shift), _mm_sra_epi32(sums[3], shift));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + x), _mm_packus_epi16(words_low, words_high));
  }
  return x;
}

// The same, 32 bytes at a time, with AVX2. Unpacking and packing both work
// within 128-bit lanes, so each lane's 16 bytes come back in their order.
__attribute__((target("avx2")))
inline size_t resample_column_bytes_avx2(const uint8_t* rows, size_t row_bytes, const GridTaps& taps,
                                         size_t i, size_t begin, uint8_t* dst) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i half = _mm256_set1_epi32(1 << (taps.precision - 1));
  const __m128i shift = _mm_cvtsi32_si128(taps.precision);
  const int32_t* w = &taps.weights[i * taps.max_taps];
  const int count = taps.count[i];
  const uint8_t* first = rows + static_cast<size_t>(taps.first[i]) * row_bytes;
  size_t x = begin;
  for (; x + 32 <= row_bytes; x += 32) {
    __m256i sums[4] = {half, half, half, half};
    int j = 0;
    for (; j + 1 < count; j += 2) {
      const __m256i weights = _mm256_set1_epi32(weight_pair(w[j], w[j + 1]));
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first + j * row_bytes + x));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first + (j + 1) * row_bytes + x));
      const __m256i low = _mm256_unpacklo_epi8(a, b);
      const __m256i high = _mm256_unpackhi_epi8(a, b);
      sums[0] = _mm256_add_epi32(sums[0], _mm256_madd_epi16(_mm256_unpacklo_epi8(low, zero), weights));
      sums[1] = _mm256_add_epi32(sums[1], _mm256_madd_epi16(_mm256_unpackhi_epi8(low, zero), weights));
      sums[2] = _mm256_add_epi32(sums[2], _mm256_madd_epi16(_mm256_unpacklo_epi8(high, zero), weights));
      sums[3] = _mm256_add_epi32(sums[3], _mm256_madd_epi16(_mm256_unpackhi_epi8(high, zero), weights));
    }
    if (j < count) {
      const __m256i weight = _mm256_set1_epi32(w[j] & 0xffff);
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first + j * row_bytes + x));
      const __m256i low = _mm256_unpacklo_epi8(a, zero);
      const __m256i high = _mm256_unpackhi_epi8(a, zero);
      sums[0] = _mm256_add_epi32(sums[0], _mm256_madd_epi16(_mm256_unpacklo_epi16(low, zero), weight));
      sums[1] = _mm256_add_epi32(sums[1], _mm256_madd_epi16(_mm256_unpackhi_epi16(low, zero), weight));
      sums[2] = _mm256_add_epi32(sums[2], _mm256_madd_epi16(_mm256_unpacklo_epi16(high, zero), weight));
      sums[3] = _mm256_add_epi32(sums[3], _mm256_madd_epi16(_mm256_unpackhi_epi16(high, zero), weight));
    }
    const __m256i words_low = _mm256_packs_epi32(_mm256_sra_epi32(sums[0], shift), _mm256_sra_epi32(sums[1], shift));
    const __m256i words_high = _mm256_packs_epi32(_mm256_sra_epi32(sums[2], shift), _mm256_sra_epi32(sums[3], shift));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + x), _mm256_packus_epi16(words_low, words_high));
  }
  return x;
}
#endif

// Output rows from `rows` (row_bytes bytes each, the taps' input rows).
inline void resample_columns_fixed(const uint8_t* rows, size_t row_bytes, const GridTaps& taps,
                                   uint8_t* out, KernelLevel level = best_kernel_level()) {
  for (size_t i = 0; i < taps.first.size(); ++i) {
    uint8_t* dst = out + i * row_bytes;
    size_t done = 0;
#if CUSTOM_OP_X86_KERNELS
    if (level == KernelLevel::kAvx2) {
      done = resample_column_bytes_avx2(rows, row_bytes, taps, i, done, dst);
    }
    if (level != KernelLevel::kPortable) {
      done = resample_column_bytes_sse2(rows, row_bytes, taps, i, done, dst);
    }
#else
    (void)level;
#endif
    resample_column_bytes_portable(rows, row_bytes, taps, i, done, row_bytes, dst);
  }
}

}  // namespace detail
}  // namespace custom_op
