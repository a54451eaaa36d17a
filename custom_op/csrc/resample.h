// Separable resampling of uint8 planes with the triangle ("bilinear") filter,
// widened by the shrink factor when antialiasing, as Pillow's resize and
// torchvision's resize(antialias=True) define it. The source region is a box
// with fractional edges, so a window decoded at a reduced DCT scale (whose
// edges fall between scaled pixels) maps exactly onto the output.
//
// Torch-free, like the rest of the core.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace custom_op {

// For each output sample along one axis: the first input sample it reads and
// its weights (normalised to sum 1).
struct ResampleTaps {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<float> weights;  // out_size * max_taps, row i starts at i * max_taps.
  int max_taps = 0;
};

// Taps that map the input interval [box_start, box_start + box_size) (in
// input samples; 0 is the left edge of sample 0) onto `out_size` samples.
inline ResampleTaps resample_taps(double box_start, double box_size, int in_size, int out_size,
                                  bool antialias) {
  ResampleTaps taps;
  const double scale = box_size / out_size;
  // Shrinking by `scale` stretches the filter by as much, so every input
  // sample contributes: that is what antialiasing means here.
  const double filter_scale = antialias ? std::max(scale, 1.0) : 1.0;
  const double support = 1.0 * filter_scale;  // The triangle's half-width is 1.
  // Never more taps than input samples: resample_row reads max_taps samples
  // from `first` for every output sample.
  taps.max_taps = std::min(static_cast<int>(std::ceil(support)) * 2 + 1, in_size);
  taps.first.resize(out_size);
  taps.count.resize(out_size);
  taps.weights.assign(static_cast<size_t>(out_size) * taps.max_taps, 0.0f);
  for (int i = 0; i < out_size; ++i) {
    const double center = box_start + (i + 0.5) * scale;
    int lo = static_cast<int>(center - support + 0.5);
    int hi = static_cast<int>(center + support + 0.5);
    lo = std::max(lo, 0);
    hi = std::min(hi, in_size);
    if (hi <= lo) {  // A box at the very edge: take the nearest sample.
      lo = std::min(std::max(static_cast<int>(center), 0), in_size - 1);
      hi = lo + 1;
    }
    hi = std::min(hi, lo + taps.max_taps);
    float* w = &taps.weights[static_cast<size_t>(i) * taps.max_taps];
    double total = 0.0;
    for (int j = lo; j < hi; ++j) {
      const double distance = std::fabs((j + 0.5 - center) / filter_scale);
      const double weight = distance < 1.0 ? 1.0 - distance : 0.0;
      w[j - lo] = static_cast<float>(weight);
      total += weight;
    }
    if (total <= 0.0) {
      w[0] = 1.0f;
      hi = lo + 1;
      total = 1.0;
    }
    for (int j = 0; j < hi - lo; ++j) {
      w[j] = static_cast<float>(w[j] / total);
    }
    // Move the start left when the fixed-size tap window would run past the
    // input's end; the weights move with it, padded with zeros.
    const int start = std::max(0, std::min(lo, in_size - taps.max_taps));
    if (start < lo) {
      std::copy_backward(w, w + (hi - lo), w + (hi - start));
      std::fill(w, w + (lo - start), 0.0f);
    }
    taps.first[i] = start;
    taps.count[i] = hi - start;
  }
  return taps;
}

// Converts `count` bytes to floats: a separate, vectorised pass, so that the
// resampling loop below works on floats only and vectorises as well.
inline void bytes_to_floats(const uint8_t* in, size_t count, float* out) {
  for (size_t i = 0; i < count; ++i) {
    out[i] = static_cast<float>(in[i]);
  }
}

// Resamples one row of `in` (`Channels` interleaved samples per pixel) into
// `out` (same interleaving) along the row. Interleaved input lets the
// compiler handle the channels of a pixel as one vector.
template <int Channels>
inline void resample_row(const float* in, const ResampleTaps& taps, float* out) {
  const int out_size = static_cast<int>(taps.first.size());
  const int max_taps = taps.max_taps;
  for (int i = 0; i < out_size; ++i) {
    const float* src = in + static_cast<size_t>(taps.first[i]) * Channels;
    const float* w = &taps.weights[static_cast<size_t>(i) * max_taps];
    float sum[Channels] = {};
    // Every output sample runs max_taps taps (the weights past its own count
    // are zero, and `first` leaves room for them): a fixed trip count the
    // compiler can unroll.
    for (int j = 0; j < max_taps; ++j) {
      for (int c = 0; c < Channels; ++c) {
        sum[c] += w[j] * src[j * Channels + c];
      }
    }
    for (int c = 0; c < Channels; ++c) {
      out[static_cast<size_t>(i) * Channels + c] = sum[c];
    }
  }
}

inline uint8_t round_to_byte(float value) {
  const float clamped = value < 0.0f ? 0.0f : (value > 255.0f ? 255.0f : value);
  return static_cast<uint8_t>(static_cast<int>(clamped + 0.5f));
}

// Resamples the columns of `rows` (in_rows x width floats, row-major) into
// `out` (taps.first.size() x width bytes).
inline void resample_columns(const float* rows, int width, const ResampleTaps& taps, uint8_t* out,
                             std::vector<float>* scratch) {
  const int out_rows = static_cast<int>(taps.first.size());
  scratch->assign(static_cast<size_t>(width), 0.0f);
  float* acc = scratch->data();
  for (int i = 0; i < out_rows; ++i) {
    std::fill(acc, acc + width, 0.0f);
    const float* w = &taps.weights[static_cast<size_t>(i) * taps.max_taps];
    for (int j = 0; j < taps.count[i]; ++j) {
      const float* src = rows + static_cast<size_t>(taps.first[i] + j) * width;
      const float weight = w[j];
      for (int x = 0; x < width; ++x) {
        acc[x] += weight * src[x];
      }
    }
    uint8_t* dst = out + static_cast<size_t>(i) * width;
    for (int x = 0; x < width; ++x) {
      dst[x] = round_to_byte(acc[x]);
    }
  }
}

}  // namespace custom_op
