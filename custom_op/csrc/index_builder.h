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

// Fills `out` (a copy of `every_mcu`'s fields, any entries) with only the
// entries of `every_mcu` (an index with an entry at every MCU) at MCU columns
// 0, mcus_per_entry, 2 * mcus_per_entry, ... of each row.
inline void thin(const Index& every_mcu, int64_t mcus_per_entry, Index* out) {
  out->mcus_per_entry = std::clamp<int64_t>(mcus_per_entry, 1, every_mcu.mcus_per_row);
  out->positions.clear();
  out->predictors.clear();
  const int components = every_mcu.components;
  for (int64_t row = 0; row < every_mcu.mcu_rows; ++row) {
    for (int64_t column = 0; column < every_mcu.mcus_per_row; column += out->mcus_per_entry) {
      const size_t e = every_mcu.entry(row, column);
      out->positions.push_back(every_mcu.positions[e]);
      out->predictors.insert(out->predictors.end(), every_mcu.predictors.begin() + e * components,
                             every_mcu.predictors.begin() + (e + 1) * components);
    }
  }
}

// The entry spacing jpeg_index builds with: the finest whose serialized index
// is at most a hundredth of the file, measured (an entry's cost depends on
// the photo: a busy one's steps and predictors vary more), and never coarser
// than one entry per MCU row, the first of each row being needed anyway. A
// crop then decodes at most one spacing of MCUs beyond its window on either
// side of each row. The size falls as the spacing grows (fewer entries to
// code), so a bisection finds it with a few counts of the code's bits, each
// far cheaper than the entropy pass that built `every_mcu`; it starts from
// the coarse end, where counts are cheapest. Leaves the chosen spacing's
// entries in `index`.
inline void thin_to_budget(const Index& every_mcu, Index* index) {
  const size_t budget = every_mcu.file_size / 100;
  *index = every_mcu;
  auto fits = [&](int64_t spacing) {
    thin(every_mcu, spacing, index);
    return serialized_size(*index) <= budget;
  };
  int64_t too_fine = 0;  // Over the budget (no spacing is finer than 1).
  int64_t coarse = every_mcu.mcus_per_row;  // Fits, or is the coarsest allowed.
  while (coarse - too_fine > 1) {
    const int64_t middle = too_fine + (coarse - too_fine) / 2;
    if (fits(middle)) {
      coarse = middle;
    } else {
      too_fine = middle;
    }
  }
  thin(every_mcu, coarse, index);
}

// Builds the index of `data` at the spacing thin_to_budget chooses:
// one entropy pass with an entry at every MCU, then the entries the spacing
// keeps. An entry per MCU holds 8 + 4 * components bytes for an MCU of 64
// pixels or more: well under what a full decode of the file writes.
inline bool build_within_budget(const uint8_t* data, size_t size, const ScanLayout& scan,
                                Index* index) {
  Index every_mcu;
  if (!build(data, size, scan, 1, &every_mcu)) {
    return false;
  }
  thin_to_budget(every_mcu, index);
  return true;
}

}  // namespace mcu_index
}  // namespace custom_op
