// Decoding from the MCU-row index: a cut-out JPEG that starts at the MCU row
// a window needs, so that the rows above it are neither Huffman- nor
// DCT-decoded.
//
// The cut-out is the file's own header with the frame's height changed, then
// one synthetic MCU row, then the entropy-coded data of the kept rows
// re-packed bit by bit from their indexed position (the original data begins
// mid-byte; its stuffed bytes are removed and stuffed again where the shift
// puts them), padded with 1-bits, and EOI. The synthetic row is there for the
// DC predictors: a scan starts with every predictor at 0, while the kept
// data codes each component's first block as a difference from the indexed
// predictor. The synthetic row's blocks walk each predictor from 0 to the
// indexed value using only DC categories the scan's table can code, and end
// with the AC table's EOB; nobody outputs its pixels, and the window moves
// one MCU row down in the cut-out. When the tables cannot express the walk,
// the cut-out is refused and the caller falls back.
//
// As with the restart cut-out (restart_seek.h), the kept rows reach one
// decoded pixel beyond the window above and below (plan_cut), because
// libjpeg's fancy upsampling reads the neighbouring chroma row; the synthetic
// row and the cut-out's end are beyond that pixel.
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
#include "restart_seek.h"

namespace custom_op {
namespace mcu_index {

// The DC differences of one component's synthetic blocks: `blocks` values,
// each of a category the DC table codes, summing to the target predictor.
//
// The codable values form intervals: {0} for category 0, and for category s
// the values of magnitude 2^(s-1) .. 2^s - 1 of either sign. A sum of values
// taken from chosen intervals reaches exactly the interval of their sums, so
// a few values reaching the target are found by trying combinations of
// intervals, not of values. The other blocks must add up to 0: zeros when
// category 0 is codable, else pairs +a, -a and, for an odd count, one triple
// that sums to 0.
class PredictorWalk {
 public:
  PredictorWalk(int32_t target, int64_t blocks, const huffman::Codes& codes) {
    for (int s = 0; s <= 11; ++s) {
      if (codes.length[s] != 0) {
        const int32_t lo = s == 0 ? 0 : 1 << (s - 1);
        const int32_t hi = s == 0 ? 0 : (1 << s) - 1;
        intervals_.push_back({lo, hi});
        if (s > 0) {
          intervals_.push_back({-hi, -lo});
        }
      }
    }
    zero_codable_ = codes.length[0] != 0;
    for (int tail = 1; tail <= 3 && tail <= blocks && !ok_; ++tail) {
      std::vector<int32_t> head;
      if (sum_of(target, tail, &head) && zeros_for(blocks - tail)) {
        values_.insert(values_.begin(), head.begin(), head.end());
        ok_ = true;
      }
    }
  }

  bool ok() const { return ok_; }

  // The difference of the next block, in order.
  int32_t next() {
    if (next_ < values_.size()) {
      return values_[next_++];
    }
    if (zero_codable_) {
      return 0;
    }
    pair_sign_ = -pair_sign_;
    return pair_sign_ * pair_value_;
  }

 private:
  struct Interval {
    int32_t lo;
    int32_t hi;
  };

  // `count` (1..3) codable values summing to `target`, into `out`.
  bool sum_of(int32_t target, int count, std::vector<int32_t>* out) const {
    const size_t n = intervals_.size();
    size_t pick[3] = {0, 0, 0};
    size_t combinations = 1;
    for (int i = 0; i < count; ++i) {
      combinations *= n;
    }
    for (size_t k = 0; k < combinations; ++k) {
      size_t rest = k;
      int32_t lo = 0;
      int32_t hi = 0;
      for (int i = 0; i < count; ++i) {
        pick[i] = rest % n;
        rest /= n;
        lo += intervals_[pick[i]].lo;
        hi += intervals_[pick[i]].hi;
      }
      if (target < lo || target > hi) {
        continue;
      }
      // Each value as small as the others' largest sums allow.
      int32_t remaining = target;
      for (int i = 0; i < count; ++i) {
        int32_t rest_hi = 0;
        for (int j = i + 1; j < count; ++j) {
          rest_hi += intervals_[pick[j]].hi;
        }
        const int32_t value = std::max(intervals_[pick[i]].lo, remaining - rest_hi);
        out->push_back(value);
        remaining -= value;
      }
      return true;
    }
    return false;
  }

  // Whether `count` codable values can sum to 0, and sets them up.
  bool zeros_for(int64_t count) {
    if (count == 0 || zero_codable_) {
      return true;
    }
    if (intervals_.empty()) {
      return false;
    }
    pair_value_ = intervals_[0].lo;
    if (count % 2 == 0) {
      return true;
    }
    std::vector<int32_t> triple;
    if (count < 3 || !sum_of(0, 3, &triple)) {
      return false;
    }
    values_ = triple;
    return true;
  }

  std::vector<Interval> intervals_;
  std::vector<int32_t> values_;
  size_t next_ = 0;
  bool zero_codable_ = false;
  bool ok_ = false;
  int32_t pair_value_ = 0;
  int32_t pair_sign_ = -1;
};

// Writes the synthetic MCU row: every block of every MCU, in scan order.
inline bool write_synthetic_row(const ScanLayout& scan, const int32_t* predictors,
                                huffman::BitWriter* writer) {
  huffman::Codes dc[kMaxComponents];
  huffman::Codes ac[kMaxComponents];
  std::vector<PredictorWalk> walks;
  for (int c = 0; c < scan.components; ++c) {
    if (!huffman::make_codes(scan.dc[c], &dc[c]) || !huffman::make_codes(scan.ac[c], &ac[c]) ||
        ac[c].length[0x00] == 0) {
      return false;  // Without an EOB code no block can end after its DC.
    }
    walks.emplace_back(predictors[c], scan.grid.mcus_per_row * scan.blocks_per_mcu(c), dc[c]);
    if (!walks.back().ok()) {
      return false;
    }
  }
  for (int64_t mcu = 0; mcu < scan.grid.mcus_per_row; ++mcu) {
    for (int c = 0; c < scan.components; ++c) {
      for (int b = scan.blocks_per_mcu(c); b > 0; --b) {
        const int32_t diff = walks[c].next();
        const int32_t magnitude = diff < 0 ? -diff : diff;
        int category = 0;
        while ((1 << category) <= magnitude) {
          ++category;
        }
        writer->put(dc[c].code[category], dc[c].length[category]);
        if (category > 0) {
          // Negative differences are sent as diff - 1 in `category` bits (T.81 F.1.2.1).
          writer->put(static_cast<uint32_t>(diff < 0 ? diff - 1 : diff), category);
        }
        writer->put(ac[c].code[0x00], ac[c].length[0x00]);
      }
    }
  }
  return true;
}

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

// The rows a cut-out keeps, widened to whole entries, and where the window
// sits in it.
struct IndexCut {
  int64_t row_begin = 0;  // The first kept MCU row of the file.
  int64_t row_end = 0;    // Exclusive.
  int64_t top = 0;        // The file row at the cut-out's row 0, minus one MCU row.
};

// Widens `rows` (MCU rows [row_begin, row_end) from plan_cut) to whole
// entries; false when that reaches the first row, which gains nothing.
inline bool plan_index_cut(const Index& index, const restarts::ScanGeometry& g, int64_t row_begin,
                           int64_t row_end, IndexCut* cut) {
  cut->row_begin = row_begin / index.rows_per_entry * index.rows_per_entry;
  const int64_t aligned_end =
      (row_end + index.rows_per_entry - 1) / index.rows_per_entry * index.rows_per_entry;
  cut->row_end = std::min(g.mcu_rows, aligned_end);
  cut->top = (cut->row_begin - 1) * g.mcu_height;
  return cut->row_begin > 0 && cut->row_end > cut->row_begin;
}

// Whether skipping the rows above `cut` saves more than the cut-out costs:
// the checksum of the whole file and the copy of the kept rows each cost a
// small fraction of what Huffman-decoding as many bytes does, so the skipped
// data must be a sixteenth of the file and an eighth of the kept data. The
// positions are the index's claims, not yet checked against the file; they
// only decide whether to try.
inline bool worth_cutting(const Index& index, const restarts::ScanGeometry& g, const IndexCut& cut) {
  const uint64_t skipped = index.positions[static_cast<size_t>(cut.row_begin / index.rows_per_entry)] / 8;
  const uint64_t end = cut.row_end == g.mcu_rows
                           ? index.end_position
                           : index.positions[static_cast<size_t>(cut.row_end / index.rows_per_entry)];
  const uint64_t kept = end / 8 - skipped;
  return skipped * 16 >= index.file_size && skipped * 8 >= kept;
}

// Writes the cut-out JPEG of `cut`'s rows (see the top of this file).
inline bool write_index_cut(const uint8_t* data, size_t size,
                            const restarts::HeaderLayout& layout, const ScanLayout& scan,
                            const Index& index, const IndexCut& cut, std::vector<uint8_t>* out) {
  const restarts::ScanGeometry& g = scan.grid;
  const int64_t height = std::min(g.image_height, cut.row_end * g.mcu_height) - cut.top;
  if (height > 65535) {
    return false;
  }
  const int64_t entry = cut.row_begin / index.rows_per_entry;
  const uint64_t from = index.positions[static_cast<size_t>(entry)];
  const uint64_t to = cut.row_end == g.mcu_rows
                          ? index.end_position
                          : index.positions[static_cast<size_t>(cut.row_end / index.rows_per_entry)];
  out->clear();
  out->reserve(static_cast<size_t>((to - from) / 8) * 101 / 100 + 2048);
  out->push_back(0xFF);
  out->push_back(0xD8);
  for (const restarts::ByteRange& range : layout.kept) {
    const size_t at = out->size();
    out->insert(out->end(), data + range.begin, data + range.end);
    if (layout.frame_size_offset > range.begin && layout.frame_size_offset < range.end) {
      uint8_t* field = out->data() + at + (layout.frame_size_offset - range.begin);
      field[0] = static_cast<uint8_t>(height >> 8);
      field[1] = static_cast<uint8_t>(height);
    }
  }
  huffman::BitWriter writer(out);
  if (!write_synthetic_row(scan, index.predictors.data() + entry * index.components, &writer) ||
      !append_data_bits(data, size, scan.scan_data_offset, from, to, &writer)) {
    return false;
  }
  writer.finish();
  out->push_back(0xFF);
  out->push_back(0xD9);
  return true;
}

// Everything before libjpeg sees the cut-out: plans the rows that cover the
// decoded region [top, bottom) x [left, right) (in pixels at scale_num / 8),
// checks the serialized index against the file, and writes the cut-out into
// `out`, with `cut_top` the file row at its row 0 (the window's row y is the
// cut-out's row y - cut_top). Returns kIndexed when the cut-out is ready, else
// why the caller must decode the ordinary way.
inline IndexOutcome make_index_cut(const uint8_t* data, size_t size,
                                   const restarts::HeaderLayout& layout, const ScanLayout& scan,
                                   const uint8_t* index_bytes, size_t index_size, int scale_num,
                                   int64_t top, int64_t left, int64_t bottom, int64_t right,
                                   std::vector<uint8_t>* out, int64_t* cut_top) {
  // One segment per row: plan_cut then keeps every column and plans rows only.
  restarts::ScanGeometry rows = scan.grid;
  rows.interval = rows.mcus_per_row;
  rows.segments_per_row = 1;
  restarts::Cut planned;
  if (!restarts::plan_cut(rows, scale_num, top, left, bottom, right, &planned)) {
    return IndexOutcome::kUnneeded;
  }
  Index index;
  if (!parse(index_bytes, index_size, &index)) {
    return IndexOutcome::kRefused;
  }
  // The planning below reads the index's entries by the file's MCU rows: an index
  // of another grid (another file's) is refused before any of them is read.
  if (index.mcu_rows != scan.grid.mcu_rows || index.mcus_per_row != scan.grid.mcus_per_row) {
    return IndexOutcome::kRefused;
  }
  IndexCut cut;
  if (!plan_index_cut(index, scan.grid, planned.row_begin, planned.row_end, &cut) ||
      !worth_cutting(index, scan.grid, cut)) {
    return IndexOutcome::kUnneeded;
  }
  // The checksum of the whole file comes last: it is the largest cost here.
  if (!matches_file(index, data, size, scan)) {
    return IndexOutcome::kRefused;
  }
  if (!write_index_cut(data, size, layout, scan, index, cut, out)) {
    return IndexOutcome::kCutFailed;
  }
  *cut_top = cut.top;
  return IndexOutcome::kIndexed;
}

}  // namespace mcu_index
}  // namespace custom_op
