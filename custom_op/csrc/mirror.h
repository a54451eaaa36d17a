// Mirrors decoded pixels left to right, in place: what torchvision's
// horizontal_flip gives (a flip of the last dimension). The batch runs it on
// the thread that decoded the image, right after the decode, while the
// pixels are still in that core's cache; a flip by torch afterwards would
// read the batch from memory again, on ATen's OpenMP threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "pixel_formats.h"

namespace custom_op {

// Reverses `length` bytes, eight at a time from both ends while at least
// sixteen are left (a byte swap reverses a word's bytes; the two words change
// ends), the middle byte by byte.
inline void reverse_bytes(uint8_t* first, size_t length) {
  uint8_t* last = first + length;
  while (last - first >= 16) {
    last -= 8;
    uint64_t head = 0;
    uint64_t tail = 0;
    std::memcpy(&head, first, sizeof head);
    std::memcpy(&tail, last, sizeof tail);
    head = __builtin_bswap64(head);
    tail = __builtin_bswap64(tail);
    std::memcpy(first, &tail, sizeof tail);
    std::memcpy(last, &head, sizeof head);
    first += 8;
  }
  std::reverse(first, last);
}

// Mirrors a [channels, height, width] image stored in `order`: planar rows
// are reversed byte by byte; an interleaved row is reversed as bytes, then
// each pixel's channels are put back in order.
inline void mirror_left_right(uint8_t* pixels, int64_t channels, int64_t height, int64_t width,
                              PixelOrder order) {
  const size_t row = static_cast<size_t>(width) * (order == PixelOrder::kPlanar ? 1 : channels);
  const int64_t rows = order == PixelOrder::kPlanar ? channels * height : height;
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* start = pixels + static_cast<size_t>(r) * row;
    reverse_bytes(start, row);
    if (order == PixelOrder::kInterleaved && channels > 1) {
      for (size_t pixel = 0; pixel < row; pixel += static_cast<size_t>(channels)) {
        std::reverse(start + pixel, start + pixel + channels);
      }
    }
  }
}

}  // namespace custom_op
