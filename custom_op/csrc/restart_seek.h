// Seeking with restart markers: decode a window from the few entropy-coded
// segments that cover it instead of every row above it.
//
// A baseline JPEG may carry a restart marker (RST0..RST7, cycling) every
// `interval` MCUs; at each one the DC predictions reset, so decoding can start
// right after it. When the interval divides the MCUs per row, every MCU row is
// a whole number of segments, and the segments covering a window form a
// rectangle of MCUs. We find them with a byte scan (memchr over the 0xFF
// bytes; the entropy coder stuffs a 0x00 after every data 0xFF, so a marker
// cannot be mistaken for data), and write a small JPEG of our own: the
// original header with the frame's size set to the rectangle's, the
// segments with their markers renumbered from RST0, and an EOI.
//
// Decoding that cut-out yields exactly the pixels of a full decode, except
// within one pixel of a cut edge that is not an image edge: there libjpeg's
// fancy upsampling replicates chroma instead of reading the neighbour. So the
// rectangle reaches at least one decoded pixel beyond the window on every
// side that is not an image edge (plan_cut).
//
// Nothing here trusts the file: a marker out of sequence, missing, or after
// the last segment makes the plan fail and the caller falls back to the
// ordinary decode. The caller also decodes the cut-out strictly and falls
// back on any warning, so damage inside a segment is never hidden either.
//
// Torch-free and libjpeg-free apart from the ScanGeometry inputs, so the core
// test and the fuzzer drive it through JpegDecoder.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace custom_op {
namespace restarts {

struct ByteRange {
  size_t begin = 0;
  size_t end = 0;  // Exclusive.
  size_t size() const { return end - begin; }
};

// Where a file's header keeps what a cut-out needs.
struct HeaderLayout {
  size_t frame_size_offset = 0;  // The SOF segment's height field; the width follows.
  size_t scan_data_offset = 0;   // The first byte after the SOS segment.
  // The marker segments a cut-out copies, in file order (DQT, DHT, SOF, DRI,
  // SOS, and the JFIF and Adobe segments that tell the colour space); other
  // APPn and COM segments (Exif, thumbnails, ICC profiles) are left out.
  std::vector<ByteRange> kept;
};

inline int read_be16(const uint8_t* p) { return (p[0] << 8) | p[1]; }

inline bool is_start_of_frame(int code) {
  return code >= 0xC0 && code <= 0xCF && code != 0xC4 && code != 0xC8 && code != 0xCC;
}

// Metadata that cannot change how the scan decodes.
inline bool is_droppable_segment(int code) {
  const bool app = code >= 0xE0 && code <= 0xEF;
  return code == 0xFE || (app && code != 0xE0 && code != 0xEE);
}

// Walks the marker segments from SOI to the first SOS. Fails (returns false)
// on anything unusual: garbage between markers, a second frame header,
// standalone markers, segments that overrun the data.
inline bool parse_header_layout(const uint8_t* data, size_t size, HeaderLayout* layout) {
  if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) {
    return false;
  }
  bool have_frame = false;
  size_t pos = 2;
  while (pos + 4 <= size) {
    if (data[pos] != 0xFF) {
      return false;
    }
    while (pos + 4 <= size && data[pos + 1] == 0xFF) {
      ++pos;  // Fill bytes before a marker.
    }
    if (pos + 4 > size) {
      return false;
    }
    const int code = data[pos + 1];
    const size_t length = static_cast<size_t>(read_be16(data + pos + 2));
    if (code == 0xD8 || code == 0xD9 || (code >= 0xD0 && code <= 0xD7) || code == 0x01 ||
        code == 0x00 || length < 2 || pos + 2 + length > size) {
      return false;
    }
    const ByteRange segment{pos, pos + 2 + length};
    if (is_start_of_frame(code)) {
      if (have_frame || length < 8) {
        return false;
      }
      have_frame = true;
      layout->frame_size_offset = pos + 5;
    }
    if (!is_droppable_segment(code)) {
      layout->kept.push_back(segment);
    }
    if (code == 0xDA) {
      layout->scan_data_offset = segment.end;
      return have_frame;
    }
    pos = segment.end;
  }
  return false;
}

// The scan's MCU grid, in pixels of the full-size image.
struct ScanGeometry {
  int64_t image_width = 0;
  int64_t image_height = 0;
  int64_t mcu_width = 0;
  int64_t mcu_height = 0;
  int64_t mcus_per_row = 0;
  int64_t mcu_rows = 0;
  int64_t interval = 0;          // MCUs per restart segment.
  int64_t segments_per_row = 0;  // mcus_per_row / interval.
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The largest horizontal and vertical sampling factors of `count` components
// (libjpeg's jpeg_component_info, or anything with the same two fields).
template <typename Component>
inline void max_sampling_factors(const Component* components, int count, int* max_h, int* max_v) {
  *max_h = 1;
  *max_v = 1;
  for (int c = 0; c < count; ++c) {
    *max_h = std::max(*max_h, components[c].h_samp_factor);
    *max_v = std::max(*max_v, components[c].v_samp_factor);
  }
}

// The MCU grid of one scan holding every component of a width x height
// image with the given largest sampling factors: an MCU is max_h x max_v
// blocks, except that a lone component is scanned non-interleaved, one block
// per MCU, whatever its factors. interval and segments_per_row are left 0.
// Both sides use it: prepare.h to choose the interval it writes, the decoder
// to seek with it, so they cannot disagree on the grid.
inline ScanGeometry mcu_grid(int64_t width, int64_t height, int components, int max_h, int max_v) {
  ScanGeometry g;
  const bool lone = components == 1;
  g.image_width = width;
  g.image_height = height;
  g.mcu_width = lone ? 8 : 8 * max_h;
  g.mcu_height = lone ? 8 : 8 * max_v;
  g.mcus_per_row = ceil_div(width, g.mcu_width);
  g.mcu_rows = ceil_div(height, g.mcu_height);
  return g;
}

// A rectangle of MCUs, [row_begin, row_end) x [column_begin, column_end),
// whose columns are whole segments.
struct Cut {
  int64_t row_begin = 0;
  int64_t row_end = 0;
  int64_t column_begin = 0;
  int64_t column_end = 0;

  int64_t top(const ScanGeometry& g) const { return row_begin * g.mcu_height; }
  int64_t left(const ScanGeometry& g) const { return column_begin * g.mcu_width; }
  int64_t height(const ScanGeometry& g) const {
    return std::min(g.image_height, row_end * g.mcu_height) - top(g);
  }
  int64_t width(const ScanGeometry& g) const {
    return std::min(g.image_width, column_end * g.mcu_width) - left(g);
  }
};

// The smallest segment-aligned rectangle of MCUs that covers the decoded
// region [top, bottom) x [left, right) -- in pixels of the image decoded at
// scale_num / 8 -- plus one pixel on every side that is not an image edge.
// Returns false when the cut would save nothing: it starts at the first row
// and spans every column, which is what the ordinary decode reads anyway.
inline bool plan_cut(const ScanGeometry& g, int scale_num, int64_t top, int64_t left,
                     int64_t bottom, int64_t right, Cut* cut) {
  const int64_t scaled_mcu_width = g.mcu_width * scale_num / 8;
  const int64_t scaled_mcu_height = g.mcu_height * scale_num / 8;
  const int64_t column_begin = std::max<int64_t>(left - 1, 0) / scaled_mcu_width;
  const int64_t column_end = ceil_div(right + 1, scaled_mcu_width);
  cut->row_begin = std::max<int64_t>(top - 1, 0) / scaled_mcu_height;
  cut->row_end = std::min(g.mcu_rows, ceil_div(bottom + 1, scaled_mcu_height));
  cut->column_begin = column_begin / g.interval * g.interval;
  cut->column_end = std::min(g.mcus_per_row, ceil_div(column_end, g.interval) * g.interval);
  return cut->row_begin > 0 || cut->column_begin > 0 || cut->column_end < g.mcus_per_row;
}

// Finds the byte ranges of the segments inside `cut`, in decoding order,
// scanning the entropy-coded data from its start. Fails when the markers are
// not exactly RST0..RST7 in sequence, one after each segment but the last,
// or when the data ends before the cut's last segment.
inline bool find_cut_segments(const uint8_t* data, size_t size, size_t scan_start,
                              const ScanGeometry& g, const Cut& cut,
                              std::vector<ByteRange>* segments) {
  const int64_t total = g.mcu_rows * g.segments_per_row;
  const int64_t first_column = cut.column_begin / g.interval;
  const int64_t end_column = cut.column_end / g.interval;
  const int64_t last_needed = (cut.row_end - 1) * g.segments_per_row + end_column - 1;
  segments->clear();
  segments->reserve(static_cast<size_t>((cut.row_end - cut.row_begin) * (end_column - first_column)));

  auto keep_if_needed = [&](int64_t segment, size_t begin, size_t end) {
    const int64_t row = segment / g.segments_per_row;
    const int64_t column = segment % g.segments_per_row;
    if (row >= cut.row_begin && column >= first_column && column < end_column) {
      segments->push_back(ByteRange{begin, end});
    }
  };

  int64_t segment = 0;
  size_t segment_begin = scan_start;
  size_t pos = scan_start;
  while (segment <= last_needed) {
    const void* found = pos < size ? std::memchr(data + pos, 0xFF, size - pos) : nullptr;
    if (found == nullptr) {
      // The data ends without EOI: acceptable only inside the last segment,
      // which libjpeg then reports (and the strict cut-out decode refuses).
      if (segment != total - 1) {
        return false;
      }
      keep_if_needed(segment, segment_begin, size);
      return true;
    }
    const size_t marker = static_cast<size_t>(static_cast<const uint8_t*>(found) - data);
    size_t code_pos = marker + 1;
    while (code_pos < size && data[code_pos] == 0xFF) {
      ++code_pos;  // Fill bytes.
    }
    if (code_pos >= size) {
      return false;
    }
    const int code = data[code_pos];
    if (code == 0x00) {
      pos = code_pos + 1;  // A stuffed data byte 0xFF.
      continue;
    }
    const bool restart = code >= 0xD0 && code <= 0xD7;
    if (!restart) {
      // Any other marker ends the scan: it must come after the last segment.
      if (segment != total - 1) {
        return false;
      }
      keep_if_needed(segment, segment_begin, marker);
      return true;
    }
    if (segment == total - 1 || code - 0xD0 != segment % 8) {
      return false;
    }
    keep_if_needed(segment, segment_begin, marker);
    ++segment;
    segment_begin = code_pos + 1;
    pos = code_pos + 1;
  }
  return true;
}

// Writes the cut-out JPEG: SOI, the kept header segments with the frame's
// size replaced, the segments joined by RST markers numbered from 0, EOI.
inline void write_cut_jpeg(const uint8_t* data, const HeaderLayout& layout, const ScanGeometry& g,
                           const Cut& cut, const std::vector<ByteRange>& segments,
                           std::vector<uint8_t>* out) {
  size_t total = 4 + 2 * segments.size();
  for (const ByteRange& range : layout.kept) {
    total += range.size();
  }
  for (const ByteRange& range : segments) {
    total += range.size();
  }
  out->resize(total);
  uint8_t* p = out->data();
  *p++ = 0xFF;
  *p++ = 0xD8;
  for (const ByteRange& range : layout.kept) {
    std::memcpy(p, data + range.begin, range.size());
    if (layout.frame_size_offset > range.begin && layout.frame_size_offset < range.end) {
      uint8_t* size_field = p + (layout.frame_size_offset - range.begin);
      const int64_t height = cut.height(g);
      const int64_t width = cut.width(g);
      size_field[0] = static_cast<uint8_t>(height >> 8);
      size_field[1] = static_cast<uint8_t>(height);
      size_field[2] = static_cast<uint8_t>(width >> 8);
      size_field[3] = static_cast<uint8_t>(width);
    }
    p += range.size();
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    if (i > 0) {
      *p++ = 0xFF;
      *p++ = static_cast<uint8_t>(0xD0 + (i - 1) % 8);
    }
    std::memcpy(p, data + segments[i].begin, segments[i].size());
    p += segments[i].size();
  }
  *p++ = 0xFF;
  *p++ = 0xD9;
  out->resize(static_cast<size_t>(p - out->data()));
}

}  // namespace restarts
}  // namespace custom_op
