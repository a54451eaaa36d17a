// Builds the MCU index (mcu_index.h) of a file by one entropy pass: our own
// Huffman decoder (huffman.h) walks every block of the one scan without
// dequantizing or transforming anything, and notes where each entry's MCU
// begins and the DC predictors there.
//
// Our own decoder rather than jpeg_read_coefficients and a bit count from the
// coefficients: the count assumes the encoder wrote each block the shortest
// way (no ZRL before an EOB, for instance), which the standard does not
// require, whereas reading the codes gives every position exactly whatever
// the encoder did; and it allocates no coefficient arrays.
//
// The pass refuses (returns false) anything it cannot vouch for: a code that
// is not in its table, data that ends early, a marker inside the scan
// (restart markers included), or anything but EOI after the last MCU's
// padding (a second scan, a DNL, trailing data bytes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "huffman.h"
#include "mcu_index.h"
#include "restart_seek.h"

namespace custom_op {
namespace mcu_index {

// What the index needs of the file's header: one baseline Huffman scan
// holding every component, in scan order, with its tables (index_scan.h
// fills it from libjpeg's header).
struct ScanLayout {
  int components = 0;
  int h[kMaxComponents] = {0, 0, 0, 0};
  int v[kMaxComponents] = {0, 0, 0, 0};
  huffman::Table dc[kMaxComponents];
  huffman::Table ac[kMaxComponents];
  restarts::ScanGeometry grid;
  size_t scan_data_offset = 0;

  // Blocks of component c in one MCU: a lone component is one block per MCU.
  int blocks_per_mcu(int c) const { return components == 1 ? 1 : h[c] * v[c]; }
};

// Whether `index` describes this file and this scan: its size, checksum and
// geometry. parse() has checked the index's own consistency.
inline bool matches_file(const Index& index, const uint8_t* data, size_t size,
                         const ScanLayout& scan) {
  if (index.file_size != size || index.components != scan.components ||
      index.width != scan.grid.image_width || index.height != scan.grid.image_height ||
      index.mcus_per_row != scan.grid.mcus_per_row || index.mcu_rows != scan.grid.mcu_rows ||
      index.scan_data_offset != scan.scan_data_offset) {
    return false;
  }
  for (int c = 0; c < scan.components; ++c) {
    if (index.h[c] != scan.h[c] || index.v[c] != scan.v[c]) {
      return false;
    }
  }
  return index.file_hash == file_hash(data, size);
}

// The serialized bytes an entry is assumed to take when the spacing is
// chosen: a two-byte position step (a step of up to 2 KB of data) and, per
// component, a predictor step of one or two bytes, rounded up.
inline int64_t estimated_entry_bytes(int components) { return 3 + components; }

// The entry spacing jpeg_index builds with: the finest that keeps the
// entries within a hundredth of the file (estimated_entry_bytes each), and
// never coarser than one entry per MCU row, the first of each row being
// needed anyway. A crop then decodes at most one spacing of MCUs beyond its
// window on either side of each row.
inline int64_t budget_mcus_per_entry(size_t file_size, const ScanLayout& scan) {
  const restarts::ScanGeometry& g = scan.grid;
  const int64_t budget = static_cast<int64_t>(file_size / 100);
  const int64_t per_row =
      std::clamp<int64_t>(budget / (std::max<int64_t>(g.mcu_rows, 1) * estimated_entry_bytes(scan.components)),
                          1, std::max<int64_t>(g.mcus_per_row, 1));
  return (g.mcus_per_row + per_row - 1) / per_row;
}

// Walks the scan of `data` and fills `index` with an entry every
// `mcus_per_entry` MCUs of each row (clamped to the row). See the top of this
// file for what it refuses.
inline bool build(const uint8_t* data, size_t size, const ScanLayout& scan, int64_t mcus_per_entry,
                  Index* index) {
  const restarts::ScanGeometry& g = scan.grid;
  if (scan.components < 1 || scan.components > kMaxComponents || mcus_per_entry < 1 ||
      g.mcus_per_row < 1 || g.mcu_rows < 1 || scan.scan_data_offset >= size) {
    return false;
  }
  huffman::Decoder dc[kMaxComponents];
  huffman::Decoder ac[kMaxComponents];
  for (int c = 0; c < scan.components; ++c) {
    if (!huffman::make_decoder(scan.dc[c], &dc[c]) || !huffman::make_decoder(scan.ac[c], &ac[c])) {
      return false;
    }
  }
  index->file_size = size;
  index->file_hash = file_hash(data, size);
  index->width = g.image_width;
  index->height = g.image_height;
  index->components = scan.components;
  for (int c = 0; c < scan.components; ++c) {
    index->h[c] = scan.h[c];
    index->v[c] = scan.v[c];
  }
  index->mcus_per_row = g.mcus_per_row;
  index->mcu_rows = g.mcu_rows;
  index->mcus_per_entry = std::min(mcus_per_entry, g.mcus_per_row);
  index->scan_data_offset = scan.scan_data_offset;
  index->positions.clear();
  index->predictors.clear();

  huffman::BitReader bits(data, size, scan.scan_data_offset);
  int32_t predictor[kMaxComponents] = {0, 0, 0, 0};
  for (int64_t row = 0; row < g.mcu_rows; ++row) {
    for (int64_t mcu = 0; mcu < g.mcus_per_row; ++mcu) {
      if (mcu % index->mcus_per_entry == 0) {
        index->positions.push_back(bits.position());
        index->predictors.insert(index->predictors.end(), predictor, predictor + scan.components);
      }
      for (int c = 0; c < scan.components; ++c) {
        for (int b = scan.blocks_per_mcu(c); b > 0; --b) {
          const int category = bits.decode(dc[c]);
          int32_t diff = 0;
          if (category < 0 || category > 11 || !bits.receive(category, &diff)) {
            return false;
          }
          predictor[c] += diff;
          if (predictor[c] <= -kMaxPredictor || predictor[c] >= kMaxPredictor) {
            return false;
          }
          // The AC coefficients as libjpeg reads them: a zero size ends the
          // block unless the run is 15 (ZRL), and a run past the 63rd
          // coefficient ends it too.
          for (int k = 1; k < 64;) {
            const int advance = bits.skip_coefficient(ac[c]);
            if (advance == 0) {
              return false;
            }
            k += advance;
          }
        }
      }
    }
  }
  index->end_position = bits.position();
  // Only padding (under a byte) may follow the last MCU, then EOI.
  bits.fill(64);
  if (!bits.at_marker() || bits.buffered_bits() >= 8 || bits.marker_pos() + 1 >= size) {
    return false;
  }
  size_t code = bits.marker_pos() + 1;
  while (code + 1 < size && data[code] == 0xFF) {
    ++code;  // Fill bytes before the marker.
  }
  return data[code] == 0xD9 && index->end_position > index->positions.back();
}

}  // namespace mcu_index
}  // namespace custom_op
