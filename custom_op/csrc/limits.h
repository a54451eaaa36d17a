// The limits a file must pass before anything proportional to its size is
// allocated: pixels, scans. Checked right after the header is read, so a
// few bytes that claim a huge image fail in microseconds.
//
// It owns the limits and their messages (each names the keyword that raises
// the limit); it must not decode, allocate or touch libjpeg's state beyond
// reading the header's fields.
#pragma once

#include <cstdint>
#include <string>

#include "jpeg_errors.h"

namespace custom_op {

struct Limits {
  // 16384 x 16384.
  int64_t max_pixels = int64_t{1} << 28;
  // A normal progressive file has about 10 scans; thousands of tiny scans are
  // a known way to make a decoder spin (TurboJPEG 3 and DALI cap them too).
  // Enforced while decoding by detail::ProgressMonitor.
  int64_t max_scans = 256;
};

// Checks the header's image size against limits.max_pixels.
inline Status check_pixels(const jpeg_decompress_struct& cinfo, const Limits& limits) {
  const int64_t pixels = static_cast<int64_t>(cinfo.image_width) * cinfo.image_height;
  if (pixels <= limits.max_pixels) {
    return Status{};
  }
  return Status{StatusCode::kDecodeError,
                "the image is " + std::to_string(cinfo.image_height) + " x " +
                    std::to_string(cinfo.image_width) + " (height x width) = " +
                    std::to_string(pixels) + " pixels, more than max_pixels=" +
                    std::to_string(limits.max_pixels)};
}

}  // namespace custom_op
