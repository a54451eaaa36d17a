// Builds the MCU index (mcu_index.h) of a file by one entropy pass: our own
// Huffman decoder (huffman.h) walks every block of the one scan
// without dequantizing or transforming anything, and notes where each
// entry's MCU begins and the DC predictors there.
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
#include <cstring>
#include <memory>
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

// The look-up steps of the walk (huffman::Decoder::steps), which only this
// pass needs.
namespace steps {

using huffman::kLookBits;
using huffman::symbol_advance;

// How the whole coefficients (each code with its value's bits) at the start
// of a look-up move a block's walk on: `bits` to skip and `advance`
// coefficients to move (run + 1 each, 16 for a ZRL, 64 for an EOB) for all
// of them, up to an EOB. Several coefficients a look-up shorten the chain of
// dependent loads that bounds the walk. All may be taken only while each
// but the last leaves the block unfinished: `guard` is their advance but the
// last one's, so k + guard >= 64 (rare: a block whose last coefficient is
// the 63rd) asks for the coefficients one at a time instead.
struct Step {
  int bits;
  int advance;
  int guard;
};

// Each field fits its byte: bits is at most kLookBits + 15, and skip_entry
// stops adding once the advance reaches 63, so advance stays under 63 + 64
// and guard under 63.
inline uint32_t pack_step(const Step& s) {
  return static_cast<uint32_t>(s.bits) | static_cast<uint32_t>(s.advance) << 8 |
         static_cast<uint32_t>(s.guard) << 16;
}

inline Step unpack_step(uint32_t packed) {
  return Step{static_cast<int>(packed & 0xFF), static_cast<int>(packed >> 8 & 0xFF),
              static_cast<int>(packed >> 16)};
}

// The length of the code at the top of the `width`-bit prefix `look` and
// its symbol, or 0 when the code is not within the prefix. Uses `d.fast`,
// which must be complete.
inline int code_in(const huffman::Decoder& d, uint32_t look, int width, int* symbol) {
  const uint16_t fast = d.fast[(look << (kLookBits - width)) & ((1u << kLookBits) - 1)];
  const int length = fast >> 8;
  *symbol = fast & 0xFF;
  return length > width ? 0 : length;
}

// The packed Step of the kLookBits-bit prefix `look`, 0 when its first code
// is longer. The first coefficient's value may run past the prefix (the
// reader holds it: see BitReader::kReadBits); the others, read from the
// prefix, must lie in it. Counting stops once the advance reaches 63 (an
// EOB's 64 included): no block has room for more after that.
inline uint32_t skip_entry(const huffman::Decoder& d, uint32_t look) {
  int symbol = 0;
  const int length = code_in(d, look, kLookBits, &symbol);
  if (length == 0) {
    return 0;
  }
  Step step{length + (symbol & 15), symbol_advance(symbol), 0};
  while (step.advance < 63 && step.bits < kLookBits) {
    const int rest = kLookBits - step.bits;
    const int code = code_in(d, look & ((1u << rest) - 1), rest, &symbol);
    const int bits = code + (symbol & 15);
    if (code == 0 || bits > rest) {
      break;
    }
    step.guard = step.advance;
    step.bits += bits;
    step.advance += symbol_advance(symbol);
  }
  return pack_step(step);
}

// Fills `d.steps` with Steps, for an AC table `d` make_decoder made.
inline void add_ac_steps(huffman::Decoder* d) {
  for (uint32_t look = 0; look < (1u << kLookBits); ++look) {
    d->steps[look] = skip_entry(*d, look);
  }
}

// A DC difference read in one look-up: its code's `length` and its
// `category` (the bits of the value that follow the code, 0..11). Packed as
// (length + category) | length << 8 | category << 16, so that the bits to
// consume come first as in a Step.
inline uint32_t dc_entry(const huffman::Decoder& d, uint32_t look) {
  int category = 0;
  const int length = code_in(d, look, kLookBits, &category);
  if (length == 0 || category > 11) {
    return 0;  // decode() then reads the code, or refuses the category.
  }
  return static_cast<uint32_t>(length + category) | static_cast<uint32_t>(length) << 8 |
         static_cast<uint32_t>(category) << 16;
}

// Fills `d.steps` with DC entries, for a DC table `d` make_decoder made.
inline void add_dc_steps(huffman::Decoder* d) {
  for (uint32_t look = 0; look < (1u << kLookBits); ++look) {
    d->steps[look] = dc_entry(*d, look);
  }
}

// One coefficient (or run, or EOB) of `d` read by itself: the symbol, then
// the value's bits. Returns its advance, or 0 for a bad code or data that
// ends early.
inline int skip_coefficient_by_symbol(huffman::BitReader* bits, const huffman::Decoder& d) {
  const int symbol = bits->decode(d);
  if (symbol < 0) {
    return 0;
  }
  bits->top_up();
  return bits->skip(symbol & 15) ? symbol_advance(symbol) : 0;
}

// The DC difference of one block coded with `d` (a DC decoder with
// add_dc_steps) into `diff`: false for a code that is not in the table, a
// category over 11 or data that ends early.
inline bool dc_difference(huffman::BitReader* bits, const huffman::Decoder& d, int32_t* diff) {
  bits->top_up();
  const uint32_t packed = d.steps[bits->peek(kLookBits)];
  if (packed == 0 || bits->buffered_bits() < huffman::BitReader::kReadBits) {
    const int category = bits->decode(d);
    return category >= 0 && category <= 11 && bits->receive(category, diff);
  }
  const int length = static_cast<int>(packed >> 8 & 0xFF);
  const int category = static_cast<int>(packed >> 16);
  // The code's bits and the value's, masked to the value's (none for
  // category 0).
  const uint32_t value = bits->peek(length + category) & ((1u << category) - 1);
  bits->consume(static_cast<int>(packed & 0xFF));
  *diff = huffman::extend(value, category);
  return true;
}

// Moves past the AC coefficients of one block coded with `d` (an AC decoder
// with add_ac_steps), as libjpeg reads them: a zero size ends the block
// unless the run is 15 (ZRL), and a run past the 63rd coefficient ends it
// too. False for a code that is not in the table or runs past the data.
inline bool skip_block_ac(huffman::BitReader* bits, const huffman::Decoder& d) {
  for (int k = 1; k < 64;) {
    bits->top_up();
    const uint32_t packed = d.steps[bits->peek(kLookBits)];
    int advance = 0;
    if (packed == 0 || bits->buffered_bits() < huffman::BitReader::kReadBits) {
      // A long code, or the data's last bits, where every read is checked.
      advance = skip_coefficient_by_symbol(bits, d);
    } else if (const Step step = unpack_step(packed); k + step.guard < 64) {
      bits->consume(step.bits);
      advance = step.advance;
    } else {
      advance = skip_coefficient_by_symbol(bits, d);
    }
    if (advance == 0) {
      return false;
    }
    k += advance;
  }
  return true;
}

}  // namespace steps

// The scan's Huffman decoders, one per distinct table of each kind:
// components that share a table (the two chroma components, nearly always)
// share its decoder, so that each is built once and its look-ups stay in the
// cache together.
struct ScanDecoders {
  huffman::Decoder dc_tables[kMaxComponents];
  huffman::Decoder ac_tables[kMaxComponents];
  const huffman::Decoder* dc[kMaxComponents] = {nullptr, nullptr, nullptr, nullptr};
  const huffman::Decoder* ac[kMaxComponents] = {nullptr, nullptr, nullptr, nullptr};
};

inline bool same_table(const huffman::Table& a, const huffman::Table& b) {
  return a.present == b.present && std::memcmp(a.counts, b.counts, sizeof(a.counts)) == 0 &&
         std::memcmp(a.symbols, b.symbols, sizeof(a.symbols)) == 0;
}

// The decoder of table `tables[c]` in `decoders` (one per component), made
// unless an earlier component's table is the same; nullptr when the table
// is not a valid code.
inline const huffman::Decoder* shared_decoder(const huffman::Table* tables, int c, bool ac,
                                              huffman::Decoder* decoders,
                                              const huffman::Decoder* const* made) {
  for (int earlier = 0; earlier < c; ++earlier) {
    if (same_table(tables[earlier], tables[c])) {
      return made[earlier];
    }
  }
  if (!huffman::make_decoder(tables[c], &decoders[c])) {
    return nullptr;
  }
  if (ac) {
    steps::add_ac_steps(&decoders[c]);
  } else {
    steps::add_dc_steps(&decoders[c]);
  }
  return &decoders[c];
}

// Fills `decoders` for the scan's tables; false when one is not a valid code.
inline bool make_scan_decoders(const ScanLayout& scan, ScanDecoders* decoders) {
  for (int c = 0; c < scan.components; ++c) {
    decoders->dc[c] = shared_decoder(scan.dc, c, false, decoders->dc_tables, decoders->dc);
    decoders->ac[c] = shared_decoder(scan.ac, c, true, decoders->ac_tables, decoders->ac);
    if (decoders->dc[c] == nullptr || decoders->ac[c] == nullptr) {
      return false;
    }
  }
  return true;
}

// Reads one block: its DC difference is added to `predictor`, its AC codes
// are skipped (their values are not needed, only how many bits they take).
// False for a bad code, data that ends early or a predictor out of bounds.
inline bool walk_block(huffman::BitReader* bits, const huffman::Decoder& dc,
                       const huffman::Decoder& ac, int32_t* predictor) {
  int32_t diff = 0;
  if (!steps::dc_difference(bits, dc, &diff)) {
    return false;
  }
  *predictor += diff;
  if (*predictor <= -kMaxPredictor || *predictor >= kMaxPredictor) {
    return false;
  }
  return steps::skip_block_ac(bits, ac);
}

// Whether only padding (under a byte), then EOI, follows the last MCU: fill
// bytes may come before the marker.
inline bool ends_with_eoi(huffman::BitReader* bits, const uint8_t* data, size_t size) {
  size_t marker = 0;
  if (!bits->only_padding_left(&marker) || marker + 1 >= size) {
    return false;
  }
  size_t code = marker + 1;
  while (code + 1 < size && data[code] == 0xFF) {
    ++code;
  }
  return data[code] == 0xD9;
}

// Copies what the index records of the file and its scan into `index`,
// with no entries yet.
inline void describe_file(const uint8_t* data, size_t size, const ScanLayout& scan,
                          int64_t mcus_per_entry, Index* index) {
  const restarts::ScanGeometry& g = scan.grid;
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
  // On the heap: the tables are too large for the stack of every thread
  // that may build an index. Not value-initialised: make_decoder writes what
  // is read.
  const std::unique_ptr<ScanDecoders> decoders(new ScanDecoders);
  if (!make_scan_decoders(scan, decoders.get())) {
    return false;
  }
  describe_file(data, size, scan, mcus_per_entry, index);

  huffman::BitReader bits(data, size, scan.scan_data_offset);
  int32_t predictor[kMaxComponents] = {0, 0, 0, 0};
  int blocks[kMaxComponents] = {0, 0, 0, 0};
  for (int c = 0; c < scan.components; ++c) {
    blocks[c] = scan.blocks_per_mcu(c);
  }
  for (int64_t row = 0; row < g.mcu_rows; ++row) {
    int64_t to_entry = 0;  // MCUs before the next entry's: a count, not a division per MCU.
    for (int64_t mcu = 0; mcu < g.mcus_per_row; ++mcu) {
      if (to_entry-- == 0) {
        to_entry = index->mcus_per_entry - 1;
        index->positions.push_back(bits.position());
        index->predictors.insert(index->predictors.end(), predictor, predictor + scan.components);
      }
      for (int c = 0; c < scan.components; ++c) {
        for (int b = blocks[c]; b > 0; --b) {
          if (!walk_block(&bits, *decoders->dc[c], *decoders->ac[c], &predictor[c])) {
            return false;
          }
        }
      }
    }
  }
  index->end_position = bits.position();
  return ends_with_eoi(&bits, data, size) && index->end_position > index->positions.back();
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
