// Pixel formats: which samples libjpeg is asked for (RowLayout) for a file's
// colour space, a ColorMode and the output's PixelOrder, and the conversions
// of such rows into the output (CMYK to RGB or luma, RGBX rows split into
// CHW planes or packed into RGB pixels).
//
// It owns every per-pixel loop of the core. It must not call libjpeg's
// decoding functions or know about windows: it sees one row at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first.
#include <cstring>

#include <jpeglib.h>

namespace custom_op {

enum class ColorMode : int { kRgb = 0, kGray = 1, kUnchanged = 2 };

// How the channels of the output are laid out in memory.
enum class PixelOrder {
  kInterleaved,  // HWC: what torchvision's decode_jpeg returns (as a CHW view),
                 // and what libjpeg produces, so rows are copied, not split.
  kPlanar,       // CHW: one plane per channel.
};

namespace detail {

// The number of channels ColorMode::kUnchanged yields for a JPEG colour
// space, or 0 when custom_op cannot decode it.
inline int stored_channels(J_COLOR_SPACE space) {
  switch (space) {
    case JCS_GRAYSCALE:
      return 1;
    case JCS_YCbCr:
    case JCS_RGB:
      return 3;
    case JCS_CMYK:
    case JCS_YCCK:
      return 4;
    default:
      return 0;
  }
}

inline bool is_cmyk(J_COLOR_SPACE space) {
  return space == JCS_CMYK || space == JCS_YCCK;
}

// How libjpeg lays out the samples of one decoded row.
enum class RowLayout {
  kGray,  // 1 byte per pixel.
  kRgb,   // R, G, B: the interleaved output's own layout.
  kRgbx,  // R, G, B and an unused byte: the fourth byte makes the split into
          // planes a vectorised 4-byte gather, several times faster than
          // splitting 3-byte pixels, at no cost in libjpeg's SIMD colour
          // conversion. The samples are those of JCS_RGB, bit for bit.
  kCmyk,  // C, M, Y, K as stored (Adobe-inverted: 255 means no ink).
};

inline int bytes_per_pixel(RowLayout layout) {
  switch (layout) {
    case RowLayout::kGray:
      return 1;
    case RowLayout::kRgb:
      return 3;
    case RowLayout::kRgbx:
    case RowLayout::kCmyk:
      return 4;
  }
  return 0;
}

// What libjpeg should output for a mode and an output order. CMYK and YCCK
// always come out as CMYK: libjpeg cannot convert them to RGB or gray, so
// emit_row does.
inline RowLayout row_layout(J_COLOR_SPACE stored, ColorMode mode, PixelOrder order) {
  if (is_cmyk(stored)) {
    return RowLayout::kCmyk;
  }
  if (mode == ColorMode::kGray || (mode == ColorMode::kUnchanged && stored == JCS_GRAYSCALE)) {
    return RowLayout::kGray;
  }
  return order == PixelOrder::kInterleaved ? RowLayout::kRgb : RowLayout::kRgbx;
}

// Whether rows in `layout` are already the output's pixels, so that libjpeg
// may write them straight into the output.
inline bool rows_are_output(RowLayout layout, int out_channels, PixelOrder order) {
  return (order == PixelOrder::kInterleaved || out_channels == 1) &&
         bytes_per_pixel(layout) == out_channels;
}

inline J_COLOR_SPACE libjpeg_output_space(RowLayout layout) {
  switch (layout) {
    case RowLayout::kGray:
      return JCS_GRAYSCALE;
    case RowLayout::kRgb:
      return JCS_EXT_RGB;
    case RowLayout::kRgbx:
      return JCS_EXT_RGBX;
    case RowLayout::kCmyk:
      return JCS_CMYK;
  }
  return JCS_UNKNOWN;
}

// x * y / 255, rounded to nearest, for x, y in [0, 255]: Pillow's MULDIV255,
// so that CMYK conversions match Pillow's to the bit.
inline uint8_t mul_div_255(int x, int y) {
  const int product = x * y + 128;
  return static_cast<uint8_t>((product + (product >> 8)) >> 8);
}

// ITU-R BT.601 luma with libjpeg's (and Pillow's) 16-bit fixed-point weights.
inline uint8_t luma(int r, int g, int b) {
  return static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 32768) >> 16);
}

// Where one row of the output goes: its first sample, the distance between
// two pixels of a channel, and between two channels of a pixel. Planar
// output has (1, plane size), interleaved output (channels, 1).
struct OutputRow {
  uint8_t* out;
  size_t pixel_step;
  size_t channel_step;
};

// CMYK as libjpeg outputs it (Adobe convention) to RGB or gray:
// R = C * K / 255 etc., exactly as Pillow converts CMYK to RGB.
inline void cmyk_row_to_rgb_or_gray(const JSAMPLE* src, int width, int out_channels,
                                    const OutputRow& dst) {
  for (int i = 0; i < width; ++i) {
    const JSAMPLE* p = src + 4 * i;
    const uint8_t r = mul_div_255(p[0], p[3]);
    const uint8_t g = mul_div_255(p[1], p[3]);
    const uint8_t b = mul_div_255(p[2], p[3]);
    uint8_t* pixel = dst.out + i * dst.pixel_step;
    if (out_channels == 3) {
      pixel[0] = r;
      pixel[dst.channel_step] = g;
      pixel[2 * dst.channel_step] = b;
    } else {
      pixel[0] = luma(r, g, b);
    }
  }
}

// Drops the fourth byte of `width` 4-byte pixels: RGBX rows to RGB pixels.
// Each pixel is stored as 4 bytes whose last one the next pixel overwrites:
// one load and one store per pixel, several times faster than three byte
// stores. The last pixel takes 3 bytes, so nothing past the row is written.
inline void rgbx_to_rgb(const JSAMPLE* src, int width, uint8_t* out) {
  for (int i = 0; i + 1 < width; ++i) {
    uint32_t pixel;
    std::memcpy(&pixel, src + 4 * i, 4);
    std::memcpy(out + 3 * i, &pixel, 4);
  }
  if (width > 0) {
    std::memcpy(out + 3 * (width - 1), src + 4 * (width - 1), 3);
  }
}

// Splits `width` 4-byte pixels into `Planes` (3 or 4) planes, byte c of each
// pixel into plane c: the planes are __restrict parameters, so that the
// compiler may vectorise the loop, and the fourth store is decided at compile
// time, so that the 3-plane loop carries no test.
template <int Planes>
inline void split_4_byte_pixels_into(const JSAMPLE* src, int width, uint8_t* __restrict p0,
                                     uint8_t* __restrict p1, uint8_t* __restrict p2,
                                     uint8_t* __restrict p3) {
  static_assert(Planes == 3 || Planes == 4, "a 4-byte pixel splits into 3 or 4 planes");
  for (int i = 0; i < width; ++i) {
    uint32_t v;
    std::memcpy(&v, src + 4 * i, 4);
    p0[i] = static_cast<uint8_t>(v);
    p1[i] = static_cast<uint8_t>(v >> 8);
    p2[i] = static_cast<uint8_t>(v >> 16);
    if constexpr (Planes == 4) {
      p3[i] = static_cast<uint8_t>(v >> 24);
    }
  }
}

// Splits `width` 4-byte pixels into the first `out_channels` (3 or 4) planes.
inline void split_4_byte_pixels(const JSAMPLE* src, int width, int out_channels, uint8_t* out,
                                size_t plane_size) {
  uint8_t* second = out + plane_size;
  uint8_t* third = out + 2 * plane_size;
  if (out_channels == 4) {
    split_4_byte_pixels_into<4>(src, width, out, second, third, out + 3 * plane_size);
  } else {
    split_4_byte_pixels_into<3>(src, width, out, second, third, nullptr);
  }
}

// Writes one decoded row, `src` holding `width` pixels in `layout`, as
// `out_channels` channels of `order` to `out`: the row's start in the
// output, whose planes (when planar) are `plane_size` bytes apart.
inline void emit_row(const JSAMPLE* src, RowLayout layout, int width, int out_channels,
                     PixelOrder order, uint8_t* out, size_t plane_size) {
  if (rows_are_output(layout, out_channels, order)) {
    std::memcpy(out, src, static_cast<size_t>(width) * out_channels);
    return;
  }
  const bool planar = order == PixelOrder::kPlanar;
  switch (layout) {
    case RowLayout::kRgbx:
      if (planar) {
        split_4_byte_pixels(src, width, /*out_channels=*/3, out, plane_size);
      } else {
        rgbx_to_rgb(src, width, out);
      }
      return;
    case RowLayout::kCmyk:
      if (out_channels == 4) {
        split_4_byte_pixels(src, width, out_channels, out, plane_size);  // Planar CMYK.
      } else {
        const OutputRow dst{out, planar ? size_t{1} : static_cast<size_t>(out_channels),
                            planar ? plane_size : size_t{1}};
        cmyk_row_to_rgb_or_gray(src, width, out_channels, dst);
      }
      return;
    case RowLayout::kGray:
    case RowLayout::kRgb:
      return;  // Always copied above: these exist only for outputs in their own layout.
  }
}

}  // namespace detail
}  // namespace custom_op
