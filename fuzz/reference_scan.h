// A reference for the MCU index's entropy pass (csrc/index_builder.h and the
// bit reader of csrc/huffman.h), used by fuzz/core_test.cc and
// fuzz/decode_fuzzer.cc: the same walk written the plain way, one bit at a
// time from one byte at a time, each code found by comparing it with the
// canonical codes of each length (T.81 F.2.2.3, DECODE), every value read.
// It has none of the builder's look-up tables, word loads or position
// arithmetic, so that agreeing with it on every entry checks those.
//
// It refuses what the builder refuses (see index_builder.h): a table that is
// no valid code, a code not in its table, a DC category over 11, a predictor
// out of bounds, data that ends before the last MCU, anything but padding
// under a byte and then EOI after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "index_scan.h"
#include "jpeg_phases.h"

namespace reference_scan {

namespace mcu_index = custom_op::mcu_index;

// The entropy-coded data from `begin` on, bit by bit: a 0xFF followed by
// 0x00 is a data byte (the 0x00 is skipped), any other 0xFF starts a marker,
// where the data ends.
class ByteBits {
 public:
  ByteBits(const uint8_t* data, size_t size, size_t begin)
      : data_(data), size_(size), begin_(begin), byte_(begin) {}

  // The next bit, or -1 at a marker or the data's end.
  int bit() {
    if (!at_data()) {
      return -1;
    }
    const int b = (data_[byte_] >> (7 - bit_)) & 1;
    if (++bit_ == 8) {
      bit_ = 0;
      byte_ += data_[byte_] == 0xFF ? 2 : 1;
    }
    return b;
  }

  // The next n bits, most significant first; false if the data ends first.
  bool bits(int n, uint32_t* value) {
    *value = 0;
    for (int i = 0; i < n; ++i) {
      const int b = bit();
      if (b < 0) {
        return false;
      }
      *value = (*value << 1) | static_cast<uint32_t>(b);
    }
    return true;
  }

  // The next bit's position: 8 * (its byte's offset from begin) + bit. At a
  // marker, the marker's byte.
  uint64_t position() const { return (byte_ - begin_) * 8 + static_cast<uint64_t>(bit_); }

  // The offset of the marker right after the current byte's remaining
  // bits (the padding), or false when a data byte comes first.
  bool marker_after_padding(size_t* marker) {
    if (bit_ != 0) {
      bit_ = 0;
      byte_ += data_[byte_] == 0xFF ? 2 : 1;
    }
    *marker = byte_;
    return !at_data();
  }

 private:
  bool at_data() const {
    return byte_ < size_ &&
           (data_[byte_] != 0xFF || (byte_ + 1 < size_ && data_[byte_ + 1] == 0x00));
  }

  const uint8_t* data_;
  size_t size_;
  size_t begin_;
  size_t byte_;  // The file offset of the byte holding the next bit.
  int bit_ = 0;  // The next bit in it, 0 the most significant.
};

// One symbol of `table`, the code read bit by bit: the codes of length l are
// the `counts[l]` values from `first` on, `first` being the code after the
// last one of length l - 1, doubled.
inline bool decode(ByteBits* in, const custom_op::huffman::Table& table, int* symbol) {
  int code = 0;
  int first = 0;
  int before = 0;  // Symbols of the shorter lengths.
  for (int l = 1; l <= 16; ++l) {
    const int b = in->bit();
    if (b < 0) {
      return false;
    }
    code = (code << 1) | b;
    const int count = table.counts[l];
    if (code - first < count) {
      *symbol = table.symbols[before + code - first];
      return true;
    }
    before += count;
    first = (first + count) << 1;
  }
  return false;
}

// The value of `category` bits `v` (T.81 F.2.2.1, EXTEND).
inline int32_t extend(uint32_t v, int category) {
  if (category == 0) {
    return 0;
  }
  const int32_t value = static_cast<int32_t>(v);
  return value < (1 << (category - 1)) ? value - (1 << category) + 1 : value;
}

// One block: its DC difference into `predictor`, its AC codes and values
// read and dropped, as libjpeg reads them (a zero size ends the block unless
// the run is 15, and a run past the 63rd coefficient ends it too).
inline bool walk_block(ByteBits* in, const custom_op::huffman::Table& dc,
                       const custom_op::huffman::Table& ac, int32_t* predictor) {
  int category = 0;
  uint32_t v = 0;
  if (!decode(in, dc, &category) || category > 11 || !in->bits(category, &v)) {
    return false;
  }
  *predictor += extend(v, category);
  if (*predictor <= -mcu_index::kMaxPredictor || *predictor >= mcu_index::kMaxPredictor) {
    return false;
  }
  for (int k = 1; k < 64;) {
    int symbol = 0;
    if (!decode(in, ac, &symbol)) {
      return false;
    }
    const int run = symbol >> 4;
    const int size = symbol & 15;
    if (size == 0) {
      if (run != 15) {
        break;
      }
      k += 16;
      continue;
    }
    if (!in->bits(size, &v)) {
      return false;
    }
    k += run + 1;
  }
  return true;
}

// Walks the scan of `data` as mcu_index::build(data, size, scan, 1, index)
// does, filling `index`'s positions and predictors (an entry at every MCU,
// as far as the walk gets) and its end position; the same outcome.
inline bool walk(const uint8_t* data, size_t size, const mcu_index::ScanLayout& scan,
                 mcu_index::Index* index) {
  index->positions.clear();
  index->predictors.clear();
  index->end_position = 0;
  const custom_op::restarts::ScanGeometry& g = scan.grid;
  if (scan.components < 1 || scan.components > mcu_index::kMaxComponents || g.mcus_per_row < 1 ||
      g.mcu_rows < 1 || scan.scan_data_offset >= size) {
    return false;
  }
  for (int c = 0; c < scan.components; ++c) {
    custom_op::huffman::Codes unused_dc;
    custom_op::huffman::Codes unused_ac;
    if (!custom_op::huffman::make_codes(scan.dc[c], &unused_dc) ||
        !custom_op::huffman::make_codes(scan.ac[c], &unused_ac)) {
      return false;
    }
  }
  ByteBits in(data, size, scan.scan_data_offset);
  int32_t predictor[mcu_index::kMaxComponents] = {0, 0, 0, 0};
  for (int64_t mcu = 0; mcu < g.mcus_per_row * g.mcu_rows; ++mcu) {
    index->positions.push_back(in.position());
    index->predictors.insert(index->predictors.end(), predictor, predictor + scan.components);
    for (int c = 0; c < scan.components; ++c) {
      for (int b = 0; b < scan.blocks_per_mcu(c); ++b) {
        if (!walk_block(&in, scan.dc[c], scan.ac[c], &predictor[c])) {
          return false;
        }
      }
    }
  }
  index->end_position = in.position();
  size_t marker = 0;
  if (!in.marker_after_padding(&marker) || marker + 1 >= size) {
    return false;
  }
  size_t code = marker + 1;
  while (code + 1 < size && data[code] == 0xFF) {
    ++code;
  }
  return data[code] == 0xD9 && index->end_position > index->positions.back();
}

// Whether the builder (an entry at every MCU) and the reference agree on
// `data`: the same outcome, the same entries as far as each got, and the
// same end when both got there. Says how they differ in `why`.
inline bool builder_agrees(const uint8_t* data, size_t size, const mcu_index::ScanLayout& scan,
                           std::string* why) {
  mcu_index::Index built;
  mcu_index::Index reference;
  const bool built_ok = mcu_index::build(data, size, scan, 1, &built);
  const bool reference_ok = walk(data, size, scan, &reference);
  if (built_ok != reference_ok) {
    *why = std::string("the builder ") + (built_ok ? "accepts" : "refuses") +
           " what the reference " + (reference_ok ? "accepts" : "refuses");
    return false;
  }
  if (built.positions != reference.positions) {
    size_t e = 0;
    while (e < built.positions.size() && e < reference.positions.size() &&
           built.positions[e] == reference.positions[e]) {
      ++e;
    }
    *why = "the positions differ from entry " + std::to_string(e) + " (builder " +
           std::to_string(built.positions.size()) + " entries, reference " +
           std::to_string(reference.positions.size()) + ")";
    return false;
  }
  if (built.predictors != reference.predictors) {
    *why = "the DC predictors differ";
    return false;
  }
  if (built_ok && built.end_position != reference.end_position) {
    *why = "the end positions differ";
    return false;
  }
  return true;
}

// The scan layout of one file as the decoder reads it for its index
// (JpegDecoder::index_scan): libjpeg's header under a jump point, following
// Note [libjpeg error handling] (csrc/jpeg_errors.h): the struct and its
// error manager live in this object, whose destructor destroys the struct.
// One object reads one header.
class LayoutReader {
 public:
  LayoutReader() {
    custom_op::detail::install_error_manager(reinterpret_cast<j_common_ptr>(&cinfo_),
                                             &err_, /*strict=*/false);
    created_ = create_guarded(&cinfo_, &err_);
  }
  ~LayoutReader() {
    if (created_) {
      jpeg_destroy_decompress(&cinfo_);
    }
  }
  LayoutReader(const LayoutReader&) = delete;
  LayoutReader& operator=(const LayoutReader&) = delete;

  // Fills `scan` from `data`'s header; false when the header does not read
  // or the file is not one the index serves (index_scan.h).
  bool read(const uint8_t* data, size_t size, mcu_index::ScanLayout* scan) {
    custom_op::restarts::HeaderLayout layout;
    return created_ && custom_op::detail::read_header_guarded(&cinfo_, &err_, data, size) &&
           custom_op::restarts::parse_header_layout(data, size, &layout) &&
           layout.scan_data_offset == size - cinfo_.src->bytes_in_buffer &&
           mcu_index::scan_layout(cinfo_, layout.scan_data_offset, scan);
  }

 private:
  // See Note [libjpeg error handling].
  static bool create_guarded(j_decompress_ptr cinfo, custom_op::detail::ErrorManager* err) {
    if (setjmp(err->jump)) {
      return false;
    }
    jpeg_create_decompress(cinfo);
    return true;
  }

  jpeg_decompress_struct cinfo_;
  custom_op::detail::ErrorManager err_;
  bool created_ = false;
};

// The scan layout of `data` (see LayoutReader::read).
inline bool read_scan_layout(const uint8_t* data, size_t size, mcu_index::ScanLayout* scan) {
  LayoutReader reader;
  return reader.read(data, size, scan);
}

}  // namespace reference_scan
