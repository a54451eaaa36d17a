// Which DCT scale a resized decode runs at: the one rule, for every path.
// The resized operator applies it when asked for kScaleAuto; Python's
// custom_op._decode._single.choose_scale asks this header (through the native
// module) rather than restating it, so the two cannot drift apart.
#pragma once

#include <cstdint>

namespace custom_op {

// The scale argument that lets the kernel choose by choose_scale_num.
constexpr int64_t kScaleAuto = 0;

// libjpeg's DCT scales (numerator over 8) a resized decode uses, smallest
// first. libjpeg-turbo has SIMD code for the 1/8, 1/4 and 1/2 scaled IDCTs
// only; the other scales are slower than no scaling at all.
constexpr int kScaleNumerators[] = {1, 2, 4};

// The numerator n of the smallest DCT scale n/8 whose decoded window is
// still at least out_height x out_width, or 8 (full scale).
//
// Only antialiased resizes scale: a DCT-scaled decode averages blocks, close
// to what a widened (antialiased) filter does, but far from plain bilinear
// interpolation, which samples single pixels: a scaled decode would then be
// far from torchvision's non-antialiased pixels. The window may
// have fractional sides (a resize grid's rectangle mapped back to the file).
inline int choose_scale_num(double crop_height, double crop_width, int64_t out_height,
                            int64_t out_width, bool antialias) {
  if (!antialias) {
    return 8;
  }
  for (const int numerator : kScaleNumerators) {
    if (crop_height * numerator >= static_cast<double>(out_height) * 8 &&
        crop_width * numerator >= static_cast<double>(out_width) * 8) {
      return numerator;
    }
  }
  return 8;
}

}  // namespace custom_op
