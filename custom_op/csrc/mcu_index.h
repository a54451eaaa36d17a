// The MCU index of a baseline JPEG without restart markers: where the
// entropy-coded data of every `mcus_per_entry`-th MCU of each MCU row begins
// (each row's first MCU included) and what each component's DC predictor is
// there, so that a decoder can start at any row and any entry column
// (index_seek.h) instead of Huffman-decoding everything before it. This file owns the index's content and
// its serialized form; index_builder.h finds the entries, index_seek.h uses
// them.
//
// A position is a bit of the file's entropy-coded data, counted in the file's
// own bytes (stuffed 0x00 bytes included) from the first byte after the SOS
// segment: 8 * byte + bit, bit 0 being the most significant. Counting raw
// bytes lets a decode start at its row without scanning the rows above it for
// stuffed bytes.
//
// The serialized form (little-endian, varints are LEB128):
//   "CJMI", version byte (3; versions 1 and 2, byte-coded, are refused),
//   varint file size, 8 bytes file_hash() of the whole file,
//   varint width, varint height, byte component count (1..4), then one byte
//   per scan component: h << 4 | v,
//   varint MCUs per row, varint MCU rows, varint MCUs per entry (1..MCUs per
//   row: entries at MCU columns 0, k, 2k, ... of every row),
//   varint offset of the entropy-coded data in the file,
//   then a bit stream of adaptive Golomb-Rice codes (index_coding.h), one
//   context for the positions and one per component: per entry after the
//   first (whose position and predictors are 0), row by row and in each row
//   left to right, the zigzag of step - predicted step, where the step is
//   position - previous entry's position (positive) and it is predicted by
//   the same step of the entry above (the previous step in the first row),
//   then per component the zigzag of predictor - the predictor of the entry
//   above (of the previous entry in the first row); then end position (after
//   the last MCU) - last entry's position, unpredicted; 0 bits to the byte,
//   8 bytes file_hash() of everything before them.
// Predicting from the entry above rather than the one to the left is what
// measures smaller on photos: the rows of an MCU row above are the nearer
// image content, the previous entry being a spacing of MCUs away.
// Nothing is trusted: parse() checks every field, and the caller compares the
// geometry with the file's own header; any mismatch refuses the index, and the
// decode falls back to the ordinary path.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "index_coding.h"
#include "restart_seek.h"

namespace custom_op {
namespace mcu_index {

constexpr uint8_t kVersion = 3;
constexpr char kMagic[4] = {'C', 'J', 'M', 'I'};
// A DC coefficient of an 8-bit JPEG fits in 12 bits; the bound only keeps a
// hostile index's sums far from overflow.
constexpr int32_t kMaxPredictor = 1 << 15;
constexpr int kMaxComponents = 4;
// A file larger than this is refused: it keeps every bit position and every
// residual far inside the code's kMaxResidualBits.
constexpr uint64_t kMaxFileSize = uint64_t{1} << 48;

struct Index {
  uint64_t file_size = 0;
  uint64_t file_hash = 0;
  int64_t width = 0;
  int64_t height = 0;
  int components = 0;
  int h[kMaxComponents] = {0, 0, 0, 0};  // Sampling factors, in scan order.
  int v[kMaxComponents] = {0, 0, 0, 0};
  int64_t mcus_per_row = 0;
  int64_t mcu_rows = 0;
  int64_t mcus_per_entry = 1;
  uint64_t scan_data_offset = 0;
  // One position per entry: entry (row, j) starts MCU j * mcus_per_entry of
  // MCU row `row`, and is entry row * entries_per_row() + j.
  std::vector<uint64_t> positions;
  // components predictors per entry.
  std::vector<int32_t> predictors;
  uint64_t end_position = 0;

  int64_t entries_per_row() const { return (mcus_per_row + mcus_per_entry - 1) / mcus_per_entry; }
  int64_t entries() const { return mcu_rows * entries_per_row(); }
  // The entry at MCU `column` (a multiple of mcus_per_entry) of `row`.
  size_t entry(int64_t row, int64_t column) const {
    return static_cast<size_t>(row * entries_per_row() + column / mcus_per_entry);
  }
};

inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);  // One load: a byte loop stays a byte loop at -O2.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

inline uint64_t rotl64(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }

// Independent lanes of file_hash: a lane's step waits for its previous
// multiply, so eight lanes keep the multiplier busy where four left it idle
// half the time.
constexpr int kHashLanes = 8;

// A checksum of `size` bytes: FNV-1a's xor-and-multiply, applied to
// little-endian 8-byte words in kHashLanes independent lanes, word i going to
// lane i % kHashLanes, with a rotation after each multiply (a multiply
// carries only upwards; the rotation feeds the high bits back), then the
// lanes folded in order, the tail bytes one by one and a final avalanche. It
// detects a stale or damaged file; it is not meant to resist someone forging
// a collision. The same value on every host (the words are read
// little-endian).
inline uint64_t file_hash(const uint8_t* data, size_t size) {
  constexpr uint64_t kPrime = 0x00000100000001B3ULL;
  constexpr uint64_t kBasis = 0xCBF29CE484222325ULL;
  uint64_t lane[kHashLanes];
  for (int k = 0; k < kHashLanes; ++k) {
    lane[k] = kBasis ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(k));
  }
  size_t i = 0;
  for (; i + 8 * kHashLanes <= size; i += 8 * kHashLanes) {
    for (int k = 0; k < kHashLanes; ++k) {
      lane[k] = rotl64((lane[k] ^ load_le64(data + i + 8 * k)) * kPrime, 29);
    }
  }
  uint64_t h = kBasis ^ static_cast<uint64_t>(size);
  for (int k = 0; k < kHashLanes; ++k) {
    h = rotl64((h ^ lane[k]) * kPrime, 31);
  }
  for (; i < size; ++i) {
    h = (h ^ data[i]) * kPrime;
  }
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDULL;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ULL;
  h ^= h >> 33;
  return h;
}

inline void put_varint(uint64_t v, std::vector<uint8_t>* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<uint8_t>(v));
}

inline uint64_t zigzag(int64_t v) {
  return v < 0 ? (static_cast<uint64_t>(-(v + 1)) << 1) | 1 : static_cast<uint64_t>(v) << 1;
}

inline void put_le64(uint64_t v, std::vector<uint8_t>* out) {
  for (int i = 0; i < 8; ++i) {
    out->push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
}

// The entry whose step and predictors predict entry e's (e >= 1): the one
// above, or in the first row the previous one.
inline int64_t reference_entry(int64_t e, int64_t entries_per_row) {
  return e >= entries_per_row ? e - entries_per_row : e - 1;
}

// The step that reached entry e (e >= 1) and the step predicted for it.
inline uint64_t step_to(const std::vector<uint64_t>& positions, int64_t e) {
  return positions[e] - positions[e - 1];
}
inline uint64_t predicted_step(const std::vector<uint64_t>& positions, int64_t e,
                               int64_t entries_per_row) {
  const int64_t reference = reference_entry(e, entries_per_row);
  return reference >= 1 ? step_to(positions, reference) : 0;
}

// The entries after the first as the bit stream of the top of this file,
// into `bits` (index_coding.h's BitWriter or BitCounter).
template <typename Writer>
void put_entries(const Index& index, Writer* bits) {
  using index_coding::put_rice;
  index_coding::RiceContext position_context;
  index_coding::RiceContext predictor_context[kMaxComponents];
  const int64_t entries = index.entries();
  const int64_t per_row = index.entries_per_row();
  const int components = index.components;
  for (int64_t e = 1; e < entries; ++e) {
    const int64_t step = static_cast<int64_t>(step_to(index.positions, e));
    put_rice(zigzag(step - static_cast<int64_t>(predicted_step(index.positions, e, per_row))),
             &position_context, bits);
    const int64_t reference = reference_entry(e, per_row);
    for (int c = 0; c < components; ++c) {
      put_rice(zigzag(static_cast<int64_t>(index.predictors[e * components + c]) -
                      index.predictors[reference * components + c]),
               &predictor_context[c], bits);
    }
  }
  put_rice(index.end_position - index.positions[entries - 1], &position_context, bits);
  bits->finish();
}

// The serialized form's fields before the entries (see the top of this
// file).
inline void put_header(const Index& index, std::vector<uint8_t>* out) {
  out->insert(out->end(), kMagic, kMagic + 4);
  out->push_back(kVersion);
  put_varint(index.file_size, out);
  put_le64(index.file_hash, out);
  put_varint(static_cast<uint64_t>(index.width), out);
  put_varint(static_cast<uint64_t>(index.height), out);
  out->push_back(static_cast<uint8_t>(index.components));
  for (int c = 0; c < index.components; ++c) {
    out->push_back(static_cast<uint8_t>(index.h[c] << 4 | index.v[c]));
  }
  put_varint(static_cast<uint64_t>(index.mcus_per_row), out);
  put_varint(static_cast<uint64_t>(index.mcu_rows), out);
  put_varint(static_cast<uint64_t>(index.mcus_per_entry), out);
  put_varint(index.scan_data_offset, out);
}

// The serialized form of a complete index (see the top of this file).
inline std::vector<uint8_t> serialize(const Index& index) {
  std::vector<uint8_t> out;
  put_header(index, &out);
  index_coding::BitWriter bits(&out);
  put_entries(index, &bits);
  put_le64(file_hash(out.data(), out.size()), &out);
  return out;
}

// The size of serialize(index), counted without writing the entries.
inline size_t serialized_size(const Index& index) {
  std::vector<uint8_t> header;
  put_header(index, &header);
  index_coding::BitCounter bits;
  put_entries(index, &bits);
  return header.size() + static_cast<size_t>(bits.bytes()) + 8;
}

// Reads what serialize() wrote, bounds-checked at every byte.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool byte(uint8_t* v) {
    if (pos_ >= size_) {
      return false;
    }
    *v = data_[pos_++];
    return true;
  }

  // At most 10 bytes and no bits beyond 64: a longer varint is malformed.
  bool varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = 0;
      if (!byte(&b) || (shift == 63 && b > 1)) {
        return false;
      }
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        return true;
      }
    }
    return false;
  }

  bool le64(uint64_t* v) {
    if (size_ - pos_ < 8) {
      return false;
    }
    *v = load_le64(data_ + pos_);
    pos_ += 8;
    return true;
  }

  size_t position() const { return pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

inline int64_t unzigzag(uint64_t v) {
  return (v & 1) ? -static_cast<int64_t>(v >> 1) - 1 : static_cast<int64_t>(v >> 1);
}

// Reads the entries' bit stream (put_entries) into `index`, whose header
// fields are set and checked: each step positive and within the data, each
// predictor bounded. Allocates the entries: the caller has bounded their
// number and bytes (parse_header, parse).
inline bool get_entries(index_coding::BitReader* bits, Index* index) {
  using index_coding::get_rice;
  index_coding::RiceContext position_context;
  index_coding::RiceContext predictor_context[kMaxComponents];
  const int64_t entries = index->entries();
  const int64_t per_row = index->entries_per_row();
  const int components = index->components;
  // Under 2^51: parse() bounds the file size.
  const uint64_t data_bits = (index->file_size - index->scan_data_offset) * 8;
  index->positions.assign(static_cast<size_t>(entries), 0);
  index->predictors.assign(static_cast<size_t>(entries * components), 0);
  uint64_t* positions = index->positions.data();
  int32_t* predictors = index->predictors.data();
  for (int64_t e = 1; e < entries; ++e) {
    const int64_t reference = reference_entry(e, per_row);
    const uint64_t predicted = predicted_step(index->positions, e, per_row);
    uint64_t residual = 0;
    if (!get_rice(&position_context, bits, &residual)) {
      return false;
    }
    const int64_t step = static_cast<int64_t>(predicted) + unzigzag(residual);
    if (step <= 0 || static_cast<uint64_t>(step) > data_bits - positions[e - 1]) {
      return false;
    }
    positions[e] = positions[e - 1] + static_cast<uint64_t>(step);
    for (int c = 0; c < components; ++c) {
      if (!get_rice(&predictor_context[c], bits, &residual) ||
          residual > 4 * static_cast<uint64_t>(kMaxPredictor)) {
        return false;
      }
      const int64_t value = predictors[reference * components + c] + unzigzag(residual);
      if (value <= -kMaxPredictor || value >= kMaxPredictor) {
        return false;
      }
      predictors[e * components + c] = static_cast<int32_t>(value);
    }
  }
  uint64_t last = 0;
  if (!get_rice(&position_context, bits, &last) || last == 0 ||
      last > data_bits - index->positions[entries - 1]) {
    return false;
  }
  index->end_position = index->positions[entries - 1] + last;
  return true;
}

// The smallest serialized index: magic, version, one-byte file size, the
// file's hash and the index's own.
constexpr size_t kMinSerializedSize = 4 + 1 + 8 + 8;

// The bytes parse() lets an index's entries take when its caller names no
// bound: the decoders' default max_memory (limits.h). A decode's own
// max_memory is checked by the binding with entries_fit() before the
// decoder sees the index.
constexpr uint64_t kDefaultMaxEntryBytes = uint64_t{256} << 20;

// The bytes the entries of `index` take once read: a position and one
// predictor per component each.
inline uint64_t entries_bytes(const Index& index) {
  return static_cast<uint64_t>(index.entries()) *
         (sizeof(uint64_t) + sizeof(int32_t) * static_cast<uint64_t>(index.components));
}

// Whether the MCU grid is the one the image's own size and sampling factors
// make, by the rule the builder and the decoder use (restart_seek.h's
// mcu_grid), so that no grid larger than the image's sizes the entries.
// The components and their factors are checked (1 to 4) before.
inline bool grid_fits_image(const Index& index) {
  const int max_h = *std::max_element(index.h, index.h + index.components);
  const int max_v = *std::max_element(index.v, index.v + index.components);
  const restarts::ScanGeometry grid =
      restarts::mcu_grid(index.width, index.height, index.components, max_h, max_v);
  return index.mcus_per_row == grid.mcus_per_row && index.mcu_rows == grid.mcu_rows;
}

// Whether the entries can be as many as the header says: every step but the
// first's is at least one bit of the data, every entry's code at least
// 1 + components bits of the `stream_bytes` of the stream.
inline bool entries_fit_data(const Index& index, size_t stream_bytes) {
  // Under 2^51: the file size is bounded above.
  const uint64_t data_bits = (index.file_size - index.scan_data_offset) * 8;
  const uint64_t steps = static_cast<uint64_t>(index.entries() - 1);
  return steps < data_bits &&
         steps * (1 + static_cast<uint64_t>(index.components)) <= 8 * static_cast<uint64_t>(stream_bytes);
}

// Reads and checks the fields before the entries, without the checksum and
// without allocating: their ranges, the grid against the image's size, and
// the number of entries against the data and the stream. `*stream_at` is
// where the entries' bit stream begins.
inline bool parse_header(const uint8_t* bytes, size_t size, Index* index, size_t* stream_at) {
  if (bytes == nullptr || size < kMinSerializedSize || std::memcmp(bytes, kMagic, 4) != 0) {
    return false;
  }
  Reader r(bytes + 4, size - 4 - 8);
  uint8_t version = 0;
  uint64_t width = 0, height = 0, mcus_per_row = 0, mcu_rows = 0, mcus_per_entry = 0;
  uint8_t components = 0;
  if (!r.byte(&version) || version != kVersion || !r.varint(&index->file_size) ||
      !r.le64(&index->file_hash) || !r.varint(&width) || !r.varint(&height) ||
      index->file_size > kMaxFileSize || !r.byte(&components) || components < 1 ||
      components > kMaxComponents || width < 1 ||
      height < 1 || width > 65535 || height > 65535) {
    return false;
  }
  index->width = static_cast<int64_t>(width);
  index->height = static_cast<int64_t>(height);
  index->components = components;
  for (int c = 0; c < components; ++c) {
    uint8_t factors = 0;
    if (!r.byte(&factors)) {
      return false;
    }
    index->h[c] = factors >> 4;
    index->v[c] = factors & 15;
    if (index->h[c] < 1 || index->h[c] > 4 || index->v[c] < 1 || index->v[c] > 4) {
      return false;
    }
  }
  if (!r.varint(&mcus_per_row) || !r.varint(&mcu_rows) || !r.varint(&mcus_per_entry) ||
      !r.varint(&index->scan_data_offset) || mcus_per_row < 1 || mcu_rows < 1 ||
      mcus_per_row > 65535 || mcu_rows > 65535 || mcus_per_entry < 1 ||
      mcus_per_entry > mcus_per_row || index->scan_data_offset >= index->file_size) {
    return false;
  }
  index->mcus_per_row = static_cast<int64_t>(mcus_per_row);
  index->mcu_rows = static_cast<int64_t>(mcu_rows);
  index->mcus_per_entry = static_cast<int64_t>(mcus_per_entry);
  *stream_at = 4 + r.position();
  return grid_fits_image(*index) && entries_fit_data(*index, size - 8 - *stream_at);
}

// Whether the serialized index's header is valid and its entries would take
// at most `max_entry_bytes`: what a decode checks against its max_memory
// before it lets parse() allocate them.
inline bool entries_fit(const uint8_t* bytes, size_t size, uint64_t max_entry_bytes) {
  Index header;
  size_t stream_at = 0;
  return parse_header(bytes, size, &header, &stream_at) && entries_bytes(header) <= max_entry_bytes;
}

// Parses and checks a serialized index: every field's range (parse_header),
// its own checksum, positions strictly increasing (every MCU codes at least
// two bits) and within the entropy-coded data's bits, the predictors
// bounded, the stream ending with its last byte (0 padding bits, no trailing
// bytes: another writer's are refused). It does not look at the JPEG:
// matches_file() does. Everything that sizes the entries is checked, and
// their bytes bounded by `max_entry_bytes`, before they are allocated, so a
// sealed index of absurd claims costs no memory.
inline bool parse(const uint8_t* bytes, size_t size, Index* index,
                  uint64_t max_entry_bytes = kDefaultMaxEntryBytes) {
  size_t stream_at = 0;
  if (!parse_header(bytes, size, index, &stream_at) || entries_bytes(*index) > max_entry_bytes ||
      load_le64(bytes + size - 8) != file_hash(bytes, size - 8)) {
    return false;
  }
  index_coding::BitReader bits(bytes + stream_at, size - 8 - stream_at);
  return get_entries(&bits, index) && bits.at_padded_end();
}

}  // namespace mcu_index
}  // namespace custom_op
