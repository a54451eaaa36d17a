// Decoding from the MCU index: a cut-out JPEG that holds only the MCUs a
// window needs -- its rows, and in each row the columns between two entries
// -- so that the MCUs above, left and right of it are not Huffman-decoded.
//
// The cut-out is the file's own header with the frame's size changed, then
// the kept MCUs' entropy-coded data re-packed bit by bit from their indexed
// positions (the original data begins mid-byte; its stuffed bytes are
// removed and stuffed again where the shift puts them), interleaved with
// synthetic MCUs (predictor_walk.h), padded with 1-bits, and EOI. The
// synthetic MCUs are there for the DC predictors: each kept segment codes its
// first block as a difference from the predictor at its start, and a
// synthetic MCU in front of it walks the predictor there from wherever the
// cut-out's data left it. No restart markers: they would turn off
// libjpeg-turbo's fast Huffman path for the whole cut-out.
//
// Two layouts, by where the kept columns start:
//   - past the first column: each kept row is S synthetic MCUs (a synthetic
//     column, usually S = 1), then the row's segment; the window moves right
//     by the synthetic column and left by the skipped columns;
//   - at the first column: a synthetic MCU row on top (unless the cut starts
//     at the first row), then each row's segment followed by S synthetic MCUs
//     when the segment ends before the row does (which walk to the next row's
//     first entry); the window moves one MCU row down.
// The synthetic MCUs are never output, and their pixels must not reach the
// window through fancy upsampling, which reads the neighbouring chroma
// sample: as with the restart cut-out (restart_seek.h), the kept MCUs reach
// one decoded pixel beyond the window on every side that is not an image
// edge (plan_cut), and a synthetic column sits only beyond such a pixel --
// never left of a window at the image's left edge, which is why that case
// puts them right of the segments. The cut-out's right edge is the image's
// when the kept columns reach it, so its last partial MCU column ends as the
// image's does. When the tables cannot express a walk, the cut-out is
// refused and the caller falls back.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "huffman.h"
#include "index_builder.h"
#include "index_stats.h"
#include "mcu_index.h"
#include "predictor_walk.h"
#include "restart_seek.h"

namespace custom_op {
namespace mcu_index {

// Appends the data bits [from, to) of the scan starting at `scan_start`
// (positions as in mcu_index.h) to `writer`, without the stuffed bytes.
// False when a position falls on a stuffed byte or a marker, or past the data.
inline bool append_data_bits(const uint8_t* data, size_t size, size_t scan_start, uint64_t from,
                             uint64_t to, huffman::BitWriter* writer) {
  if (from >= to || to / 8 > size - scan_start) {
    return false;
  }
  const size_t first = scan_start + static_cast<size_t>(from / 8);
  const size_t last = scan_start + static_cast<size_t>(to / 8);
  const int first_bit = static_cast<int>(from % 8);
  const int last_bits = static_cast<int>(to % 8);
  if (data[first - 1] == 0xFF || (last_bits > 0 && last >= size)) {
    return false;  // `first` would be a stuffed byte or a marker's code.
  }
  if (first == last) {
    const int take = last_bits - first_bit;
    writer->put(static_cast<uint32_t>(data[first] >> (8 - last_bits)) & ((1u << take) - 1), take);
    return data[first] != 0xFF || (first + 1 < size && data[first + 1] == 0x00);
  }
  // The first byte's bits from first_bit on, then whole bytes up to `last`:
  // runs without 0xFF in one piece, each 0xFF's stuffed 0x00 checked and left
  // out.
  size_t p = first;
  if (first_bit > 0) {
    writer->put(data[p] & ((1u << (8 - first_bit)) - 1), 8 - first_bit);
    if (data[p] == 0xFF) {
      if (p + 1 >= size || data[p + 1] != 0x00) {
        return false;
      }
      ++p;
    }
    ++p;
  }
  while (p < last) {
    const void* found = std::memchr(data + p, 0xFF, last - p);
    const size_t run_end = found == nullptr ? last : static_cast<size_t>(static_cast<const uint8_t*>(found) - data) + 1;
    writer->put_bytes(data + p, run_end - p);
    if (found != nullptr) {
      if (run_end >= size || data[run_end] != 0x00) {
        return false;
      }
      p = run_end + 1;
    } else {
      p = run_end;
    }
  }
  if (p != last) {
    return false;  // `to` fell on a stuffed byte.
  }
  if (last_bits > 0) {
    const uint8_t b = data[last];
    if (b == 0xFF && (last + 1 >= size || data[last + 1] != 0x00)) {
      return false;
    }
    writer->put(static_cast<uint32_t>(b >> (8 - last_bits)), last_bits);
  }
  return true;
}


// The data position where the MCU at `column` (an entry's column, or
// mcus_per_row for the row's end) of `row` begins.
inline uint64_t position_at(const Index& index, int64_t row, int64_t column) {
  if (column < index.mcus_per_row) {
    return index.positions[index.entry(row, column)];
  }
  return row + 1 < index.mcu_rows ? index.positions[index.entry(row + 1, 0)] : index.end_position;
}

// The predictors there (every component's), or nullptr after the last MCU.
inline const int32_t* predictors_at(const Index& index, int64_t row, int64_t column) {
  if (column >= index.mcus_per_row) {
    ++row;
    column = 0;
  }
  return row < index.mcu_rows ? index.predictors.data() + index.entry(row, column) * index.components
                              : nullptr;
}

// The MCUs a cut-out keeps, widened to entries, and its layout (see the top
// of this file).
struct IndexCut {
  int64_t row_begin = 0;     // The first kept MCU row of the file.
  int64_t row_end = 0;       // Exclusive.
  int64_t column_begin = 0;  // The first kept MCU column: an entry's.
  int64_t column_end = 0;    // Exclusive: an entry's, or mcus_per_row.
  bool synthetic_row = false;
  int64_t synthetic_columns = 0;  // S: synthetic MCUs per kept row.
  // The file's pixel at the cut-out's (0, 0): negative left is inside the
  // synthetic column.
  int64_t top = 0;
  int64_t left = 0;

  bool synthetic_left() const { return column_begin > 0; }
};

// The most synthetic MCUs a row gets. One does for a file's standard tables;
// the optimised tables of small files may lack the DC categories a single
// block would need.
constexpr int64_t kMaxSyntheticColumns = 3;

// Widens the MCUs [row_begin, row_end) x [column_begin, column_end) that
// plan_cut found to entries; false when that is the whole image from its
// first row, which gains nothing.
inline bool plan_index_cut(const Index& index, const restarts::Cut& planned, IndexCut* cut) {
  const int64_t k = index.mcus_per_entry;
  cut->row_begin = planned.row_begin;
  cut->row_end = planned.row_end;
  cut->column_begin = planned.column_begin / k * k;
  cut->column_end = std::min(index.mcus_per_row, (planned.column_end + k - 1) / k * k);
  return cut->row_end > cut->row_begin && cut->column_end > cut->column_begin &&
         (cut->row_begin > 0 || cut->column_begin > 0 || cut->column_end < index.mcus_per_row);
}

// Whether the synthetic MCUs of `cut` with S = `columns` can walk every
// predictor where it must go.
inline bool walks_fit(const ScanLayout& scan, const SyntheticCodes& codes, const Index& index,
                      const IndexCut& cut, int64_t columns) {
  const int32_t zeros[kMaxComponents] = {0, 0, 0, 0};
  if (cut.synthetic_left()) {
    for (int64_t row = cut.row_begin; row < cut.row_end; ++row) {
      const int32_t* from = row == cut.row_begin ? zeros : predictors_at(index, row - 1, cut.column_end);
      if (!can_walk(scan, codes, columns, from, predictors_at(index, row, cut.column_begin))) {
        return false;
      }
    }
    return true;
  }
  for (int64_t row = cut.row_begin; columns > 0 && row < cut.row_end; ++row) {
    const int32_t* from = predictors_at(index, row, cut.column_end);
    const int32_t* next = predictors_at(index, row + 1, 0);
    if (!can_walk(scan, codes, columns, from, next == nullptr ? from : next)) {
      return false;
    }
  }
  return true;
}

// Chooses the layout of `cut` (see the top of this file): the fewest
// synthetic MCUs per row whose walks the tables can code. False when none do.
inline bool lay_out(const ScanLayout& scan, const SyntheticCodes& codes, const Index& index,
                    IndexCut* cut) {
  const restarts::ScanGeometry& g = scan.grid;
  const bool needs_columns = cut->synthetic_left() || cut->column_end < index.mcus_per_row;
  int64_t columns = needs_columns ? 1 : 0;
  while (needs_columns && !walks_fit(scan, codes, index, *cut, columns)) {
    if (++columns > kMaxSyntheticColumns) {
      return false;
    }
  }
  cut->synthetic_columns = columns;
  cut->synthetic_row = !cut->synthetic_left() && cut->row_begin > 0;
  cut->top = (cut->row_begin - (cut->synthetic_row ? 1 : 0)) * g.mcu_height;
  cut->left = cut->synthetic_left() ? (cut->column_begin - cut->synthetic_columns) * g.mcu_width : 0;
  return true;
}

// The cut-out's frame, in pixels: the kept MCUs and the synthetic ones, cut
// at the image's right and bottom edges when the kept MCUs reach them.
inline int64_t cut_width(const restarts::ScanGeometry& g, const IndexCut& cut) {
  return std::min(g.image_width, cut.column_end * g.mcu_width) - cut.left +
         (cut.synthetic_left() ? 0 : cut.synthetic_columns * g.mcu_width);
}

inline int64_t cut_height(const restarts::ScanGeometry& g, const IndexCut& cut) {
  return std::min(g.image_height, cut.row_end * g.mcu_height) - cut.top;
}

// The data bits the cut-out keeps, as the index claims them.
inline uint64_t kept_bits(const Index& index, const IndexCut& cut) {
  uint64_t kept = 0;
  for (int64_t row = cut.row_begin; row < cut.row_end; ++row) {
    kept += position_at(index, row, cut.column_end) - position_at(index, row, cut.column_begin);
  }
  return kept;
}

// Whether skipping the MCUs outside `cut` saves more than the cut-out costs.
// The ordinary decode Huffman-decodes every MCU up to the end of the last
// kept row; the cut-out, the kept ones, after a checksum of the whole file, a
// shifted copy of the kept data and a second decoder's start. Those costs are
// a small fraction of Huffman-decoding the same bytes, but Huffman decoding is
// only part of a decode: the skipped data must be a sixteenth of the file and
// a quarter of the kept data. The positions are the index's claims,
// not yet checked against the file; they only decide whether to try.
inline bool worth_cutting(const Index& index, const IndexCut& cut) {
  const uint64_t read = position_at(index, cut.row_end - 1, index.mcus_per_row);
  const uint64_t kept = kept_bits(index, cut);
  if (kept > read) {
    return false;  // Only a hostile index claims that.
  }
  const uint64_t skipped = read - kept;
  return skipped / 8 * 16 >= index.file_size && skipped * 4 >= kept;
}

// Writes the kept rows' segments and the synthetic MCUs between them.
inline bool write_cut_data(const uint8_t* data, size_t size, const ScanLayout& scan,
                           const SyntheticCodes& codes, const Index& index, const IndexCut& cut,
                           huffman::BitWriter* writer) {
  const int32_t zeros[kMaxComponents] = {0, 0, 0, 0};
  const size_t start = scan.scan_data_offset;
  const int64_t columns = cut.synthetic_columns;
  if (cut.synthetic_row) {
    const int64_t mcus = cut.column_end + columns;
    if (!write_synthetic_mcus(scan, codes, mcus, zeros, predictors_at(index, cut.row_begin, 0), writer)) {
      return false;
    }
  }
  if (columns == 0) {  // Whole rows: one stretch of data.
    return append_data_bits(data, size, start, position_at(index, cut.row_begin, 0),
                            position_at(index, cut.row_end - 1, index.mcus_per_row), writer);
  }
  for (int64_t row = cut.row_begin; row < cut.row_end; ++row) {
    const uint64_t from = position_at(index, row, cut.column_begin);
    const uint64_t to = position_at(index, row, cut.column_end);
    const int32_t* at_end = predictors_at(index, row, cut.column_end);
    if (cut.synthetic_left()) {
      const int32_t* before = row == cut.row_begin ? zeros : predictors_at(index, row - 1, cut.column_end);
      if (!write_synthetic_mcus(scan, codes, columns, before,
                                predictors_at(index, row, cut.column_begin), writer) ||
          !append_data_bits(data, size, start, from, to, writer)) {
        return false;
      }
    } else {
      const int32_t* next = predictors_at(index, row + 1, 0);
      if (!append_data_bits(data, size, start, from, to, writer) ||
          !write_synthetic_mcus(scan, codes, columns, at_end, next == nullptr ? at_end : next,
                                writer)) {
        return false;
      }
    }
  }
  return true;
}

// Writes the cut-out JPEG of `cut` (see the top of this file).
inline bool write_index_cut(const uint8_t* data, size_t size,
                            const restarts::HeaderLayout& layout, const ScanLayout& scan,
                            const SyntheticCodes& codes, const Index& index, const IndexCut& cut,
                            std::vector<uint8_t>* out) {
  const restarts::ScanGeometry& g = scan.grid;
  const int64_t height = cut_height(g, cut);
  const int64_t width = cut_width(g, cut);
  if (height > 65535 || width > 65535) {
    return false;
  }
  out->clear();
  out->reserve(static_cast<size_t>(kept_bits(index, cut) / 8) * 101 / 100 + 2048);
  out->push_back(0xFF);
  out->push_back(0xD8);
  for (const restarts::ByteRange& range : layout.kept) {
    const size_t at = out->size();
    out->insert(out->end(), data + range.begin, data + range.end);
    if (layout.frame_size_offset > range.begin && layout.frame_size_offset < range.end) {
      uint8_t* field = out->data() + at + (layout.frame_size_offset - range.begin);
      field[0] = static_cast<uint8_t>(height >> 8);
      field[1] = static_cast<uint8_t>(height);
      field[2] = static_cast<uint8_t>(width >> 8);
      field[3] = static_cast<uint8_t>(width);
    }
  }
  huffman::BitWriter writer(out);
  if (!write_cut_data(data, size, scan, codes, index, cut, &writer)) {
    return false;
  }
  writer.finish();
  out->push_back(0xFF);
  out->push_back(0xD9);
  return true;
}

// Everything before libjpeg sees the cut-out: plans the MCUs that cover the
// decoded region [top, bottom) x [left, right) (in pixels at scale_num / 8),
// checks the serialized index against the file, and writes the cut-out into
// `out`, with (`cut_top`, `cut_left`) the file's pixel at its (0, 0): the
// window's pixel (y, x) is the cut-out's (y - cut_top, x - cut_left).
// Returns kIndexed when the cut-out is ready, else why the caller must decode
// the ordinary way.
inline IndexOutcome make_index_cut(const uint8_t* data, size_t size,
                                   const restarts::HeaderLayout& layout, const ScanLayout& scan,
                                   const uint8_t* index_bytes, size_t index_size, int scale_num,
                                   int64_t top, int64_t left, int64_t bottom, int64_t right,
                                   std::vector<uint8_t>* out, int64_t* cut_top, int64_t* cut_left) {
  // plan_cut with one MCU per segment plans the MCUs the window needs; the
  // entries widen them below.
  restarts::ScanGeometry mcus = scan.grid;
  mcus.interval = 1;
  mcus.segments_per_row = mcus.mcus_per_row;
  restarts::Cut planned;
  if (!restarts::plan_cut(mcus, scale_num, top, left, bottom, right, &planned)) {
    return IndexOutcome::kUnneeded;
  }
  Index index;
  if (!parse(index_bytes, index_size, &index)) {
    return IndexOutcome::kRefused;
  }
  // The planning below reads the index's entries by the file's MCU grid: an
  // index of another grid (another file's) is refused before any is read.
  if (index.mcu_rows != scan.grid.mcu_rows || index.mcus_per_row != scan.grid.mcus_per_row ||
      index.components != scan.components) {
    return IndexOutcome::kRefused;
  }
  IndexCut cut;
  if (!plan_index_cut(index, planned, &cut) || !worth_cutting(index, cut)) {
    return IndexOutcome::kUnneeded;
  }
  // The checksum of the whole file comes last: it is the largest cost here.
  if (!matches_file(index, data, size, scan)) {
    return IndexOutcome::kRefused;
  }
  SyntheticCodes codes;
  if (!codes.make(scan) || !lay_out(scan, codes, index, &cut) ||
      !write_index_cut(data, size, layout, scan, codes, index, cut, out)) {
    return IndexOutcome::kCutFailed;
  }
  *cut_top = cut.top;
  *cut_left = cut.left;
  return IndexOutcome::kIndexed;
}

}  // namespace mcu_index
}  // namespace custom_op
