// Baseline JPEG Huffman coding, both ways, for the MCU-row index: reading the
// entropy-coded data (index_builder.h walks every MCU to find where rows
// begin, fast enough that an index costs well under a decode of the file)
// and writing codes (index_seek.h writes a synthetic MCU row and re-packs
// the rows a crop needs). Written from the JPEG specification (ITU-T T.81,
// Annex C and F.2.2): canonical codes assigned in order of length.
//
// Torch-free and libjpeg-free: the tables come in as the DHT's 16 counts and
// symbol list, copied out of libjpeg's header by index_scan.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace custom_op {
namespace huffman {

// A DHT table: counts[l] codes of length l (1..16), then the symbols in order.
struct Table {
  bool present = false;
  uint8_t counts[17] = {0};
  uint8_t symbols[256] = {0};
};

// The canonical code of every symbol, for writing. length 0: not codable.
struct Codes {
  uint16_t code[256] = {0};
  uint8_t length[256] = {0};
};

// Fills `codes`; false when the counts describe no valid prefix code (more
// codes of a length than that length can hold, or more than 256 symbols).
inline bool make_codes(const Table& table, Codes* codes) {
  if (!table.present) {
    return false;
  }
  int total = 0;
  uint32_t code = 0;
  for (int l = 1; l <= 16; ++l) {
    for (int i = 0; i < table.counts[l]; ++i) {
      if (total >= 256 || code >= (1u << l)) {
        return false;
      }
      const uint8_t symbol = table.symbols[total++];
      if (codes->length[symbol] == 0) {  // A repeated symbol keeps its first code.
        codes->code[symbol] = static_cast<uint16_t>(code);
        codes->length[symbol] = static_cast<uint8_t>(l);
      }
      ++code;
    }
    code <<= 1;
  }
  return total > 0;
}

// Decoding tables: codes of up to kLookBits bits in one look-up, longer ones
// by comparing with the largest code of each length. The width weighs the
// coefficients one look-up takes (the usual tables' frequent codes with
// their values, often two of them) against the time to build a table of
// 2^kLookBits entries per file and the cache the tables share.
constexpr int kLookBits = 11;

struct Decoder {
  // (length << 8) | symbol for every kLookBits-bit prefix whose code is that
  // short, 0 otherwise. Left for make_decoder to write (as `steps` is for
  // index_builder.h): a decoder nobody makes costs no initialisation.
  uint16_t fast[1 << kLookBits];
  int32_t max_code[18] = {0};    // The largest code of each length, -1 if none.
  int32_t value_offset[18] = {0};  // symbols[value_offset[l] + code] decodes a code of length l.
  uint8_t symbols[256] = {0};
  // What a kLookBits-bit prefix does when its first code fits in it, for
  // index_builder.h's walk (which fills it): for an AC table a whole step of
  // coefficients, for a DC table a whole difference. 0: decode() the
  // symbol instead.
  uint32_t steps[1 << kLookBits];
};

// The coefficients a run of AC symbols codes: run + 1, 16 for ZRL, 64 for
// EOB (the block's end, whatever remains of it).
inline int symbol_advance(int symbol) {
  const int run = symbol >> 4;
  const int size = symbol & 15;
  return size != 0 ? run + 1 : run == 15 ? 16 : 64;
}

// Fills `d`'s decoding tables (not its `steps`); false when the counts
// describe no valid prefix code.
inline bool make_decoder(const Table& table, Decoder* d) {
  Codes unused;
  if (!make_codes(table, &unused)) {
    return false;
  }
  std::memset(d->fast, 0, sizeof(d->fast));
  int k = 0;
  int32_t code = 0;
  for (int l = 1; l <= 16; ++l) {
    const int n = table.counts[l];
    d->value_offset[l] = k - code;
    d->max_code[l] = n > 0 ? code + n - 1 : -1;
    for (int i = 0; i < n; ++i, ++k, ++code) {
      d->symbols[k] = table.symbols[k];
      if (l <= kLookBits) {
        const int shift = kLookBits - l;
        for (int fill = 0; fill < (1 << shift); ++fill) {
          d->fast[(code << shift) | fill] = static_cast<uint16_t>(l << 8 | table.symbols[k]);
        }
      }
    }
    code <<= 1;
  }
  d->max_code[17] = 0x7FFFFFFF;  // A sentinel: no code is longer than 16 bits.
  return true;
}

// The signed value of the `category` bits `v` (T.81 F.2.2.1, EXTEND): the
// upper half of the range stands for itself, the lower half for negatives.
// 0 for category 0.
inline int32_t extend(uint32_t v, int category) {
  const int32_t half = (1 << category) >> 1;
  const int32_t value = static_cast<int32_t>(v);
  return value < half ? value - (1 << category) + 1 : value;
}

// The 8 bytes at `p` as one big-endian word: the order entropy-coded data
// is read in.
inline uint64_t load_be64(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);  // One load: a byte loop stays a byte loop at -O2.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

constexpr uint64_t kLowBits7 = 0x7F7F7F7F7F7F7F7FULL;
constexpr uint64_t kOnes8 = 0x0101010101010101ULL;
constexpr uint64_t kHighBits8 = 0x8080808080808080ULL;

// Whether any byte of `word` is 0xFF: the classic zero-byte test applied to
// its complement, exact as a yes or no (a borrow can only spread upwards
// from a byte that is zero already).
inline bool has_ff_byte(uint64_t word) {
  const uint64_t inverse = ~word;
  return ((inverse - kOnes8) & word & kHighBits8) != 0;
}

// The high bit of each byte of `word` that is 0xFF, and no other bit: the
// zero-byte mask of its complement computed without borrows, so that it is
// exact for every byte and not only for the first.
inline uint64_t ff_byte_mask(uint64_t word) {
  const uint64_t inverse = ~word;
  return ~(((inverse & kLowBits7) + kLowBits7) | inverse | kLowBits7);
}

// Reads entropy-coded data from `begin` (the first byte after SOS) on,
// removing the stuffed 0x00 after every data 0xFF and stopping at the first
// marker, and knows the position of its next bit in the file's own bytes
// (see mcu_index.h).
//
// The buffer takes 8 bytes at a time when none of them is 0xFF (one load and
// one test), byte by byte otherwise, so stuffing and markers cost only where
// they are. Each read first tops the buffer up to at least kReadBits bits,
// which one look-up step of index_builder.h's walk never exceeds (a code of
// up to kLookBits bits and up to 15 bits of its value, or whole coefficients
// within kLookBits bits); a longer code is read alone, and its value after
// another top-up. Only at a
// marker or the data's end can fewer be buffered; every read is then
// checked, and one that would pass them fails.
//
// The unread bits are kept twice: left-aligned in `window_` for the
// look-ups (a constant shift gives the next bits, and a consumed code is one
// shift away), and as the last 8 loaded data bytes in `loaded_` for
// positions, which are worked out only when asked: those bytes' 0xFF bytes
// are exactly the ones whose 0x00 was skipped, so the next bit's file offset
// is the read offset less the bytes from that bit on and the stuffed bytes
// among them.
class BitReader {
 public:
  static constexpr int kReadBits = 27;
  static_assert(kLookBits + 15 <= kReadBits && kReadBits >= 16 && kReadBits <= 56,
                "a look-up step, or a code of up to 16 bits, must fit in what a top-up leaves");

  BitReader(const uint8_t* data, size_t size, size_t begin)
      : data_(data), size_(size), begin_(begin), pos_(begin) {}

  // The next bit's position: 8 * (file byte - begin) + bit, bit 0 the most
  // significant. At a marker with nothing buffered: the marker's byte.
  uint64_t position() {
    if (bits_ == 0) {
      refill();
      if (bits_ == 0) {
        return static_cast<uint64_t>(marker_pos_ - begin_) * 8;
      }
    }
    // Whole data bytes from the next bit's byte to the last loaded one,
    // that byte included: at most 8, since at most 64 bits are buffered.
    const int bytes_from_bit = ((bits_ - 1) >> 3) + 1;
    const uint64_t in_those_bytes =
        bytes_from_bit == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * bytes_from_bit)) - 1;
    const int stuffed = count_flags(ff_byte_mask(loaded_) & in_those_bytes);
    const size_t byte = pos_ - static_cast<size_t>(bytes_from_bit + stuffed);
    return static_cast<uint64_t>(byte - begin_) * 8 + static_cast<uint64_t>(7 - ((bits_ - 1) & 7));
  }

  // One symbol of `d`, or -1 for a code that is not in the table or runs
  // past the data.
  int decode(const Decoder& d) {
    top_up();
    const uint16_t fast = d.fast[peek(kLookBits)];
    if (fast != 0) {
      return skip(fast >> 8) ? (fast & 0xFF) : -1;
    }
    return decode_long(d);
  }

  // `n` (0..16) bits as a signed coefficient value (T.81 F.2.2.1, EXTEND).
  bool receive(int n, int32_t* value) {
    if (n == 0) {
      *value = 0;
      return true;
    }
    top_up();
    const uint32_t v = peek(n);
    if (!skip(n)) {
      return false;
    }
    *value = extend(v, n);
    return true;
  }

  // Tops the buffer up to kReadBits bits or more unless a marker is nearer.
  void top_up() {
    if (bits_ < kReadBits) {
      refill();
    }
  }

  // The next n (1..32) bits, zeros beyond the data's end.
  uint32_t peek(int n) const { return static_cast<uint32_t>(window_ >> (64 - n)); }

  // Drops n (0..32) buffered bits, which must be there.
  void consume(int n) {
    window_ <<= n;
    bits_ -= n;
  }

  // Consumes n bits; false when fewer are left (at a marker).
  bool skip(int n) {
    if (bits_ < n) {
      return false;
    }
    consume(n);
    return true;
  }

  // The bits buffered: kReadBits or more after top_up() unless at a marker.
  int buffered_bits() const { return bits_; }

  // Whether fewer than 8 bits (a byte's padding) remain before a marker or
  // the data's end; if so, the marker's offset (the data's size at the end)
  // goes to `marker`.
  bool only_padding_left(size_t* marker) {
    if (bits_ >= 8) {
      return false;
    }
    refill_bytewise();
    if (!at_marker_ || bits_ >= 8) {
      return false;
    }
    *marker = marker_pos_;
    return true;
  }

 private:
  // How many bytes of `flags` (each 0x80 or 0) are set: the multiply adds
  // every byte's flag into the top byte, without needing a popcount
  // instruction the target may lack.
  static int count_flags(uint64_t flags) { return static_cast<int>(((flags >> 7) * kOnes8) >> 56); }

  // Tops the buffer up to 56 bits or more unless a marker has been reached:
  // the whole bytes it has room for at once when none of them is 0xFF.
  void refill() {
    if (at_marker_) {
      return;
    }
    if (bits_ <= 55 && size_ - pos_ >= 8) {
      const int take = (63 - bits_) >> 3;  // 1..7 bytes, leaving room for none more.
      const uint64_t bytes = load_be64(data_ + pos_) >> (64 - 8 * take);
      if (!has_ff_byte(bytes)) {
        loaded_ = (loaded_ << (8 * take)) | bytes;
        window_ |= bytes << (64 - bits_ - 8 * take);
        bits_ += 8 * take;
        pos_ += static_cast<size_t>(take);
        return;
      }
    }
    refill_bytewise();
  }

  // Loads bytes one at a time up to more than 56 bits, dropping the 0x00
  // after a data 0xFF, and stops at a marker (0xFF then anything but 0x00, or
  // a 0xFF that ends the data) or the data's end.
  void refill_bytewise() {
    while (bits_ <= 56 && !at_marker_) {
      if (pos_ >= size_) {
        at_marker_ = true;
        marker_pos_ = size_;
        break;
      }
      const uint8_t b = data_[pos_];
      if (b == 0xFF) {
        if (pos_ + 1 < size_ && data_[pos_ + 1] == 0x00) {
          pos_ += 2;
        } else {
          at_marker_ = true;
          marker_pos_ = pos_;
          break;
        }
      } else {
        ++pos_;
      }
      loaded_ = (loaded_ << 8) | b;
      window_ |= static_cast<uint64_t>(b) << (56 - bits_);
      bits_ += 8;
    }
  }

  // decode() for a code longer than kLookBits bits, or not in the table.
  int decode_long(const Decoder& d) {
    int l = kLookBits + 1;
    int32_t code = static_cast<int32_t>(peek(l));
    while (code > d.max_code[l]) {
      if (++l > 16) {
        return -1;
      }
      code = static_cast<int32_t>(peek(l));
    }
    return skip(l) ? d.symbols[d.value_offset[l] + code] : -1;
  }

  const uint8_t* data_;
  size_t size_;
  size_t begin_;
  size_t pos_;  // The next byte to load.
  // The unread bits, left-aligned, 0 past the bits_ of them.
  uint64_t window_ = 0;
  // The last 8 loaded data bytes (stuffing removed), the last one lowest.
  uint64_t loaded_ = 0;
  int bits_ = 0;
  bool at_marker_ = false;
  size_t marker_pos_ = 0;
};

// Writes entropy-coded data: codes MSB first, a 0x00 stuffed after every
// 0xFF, the last byte padded with 1-bits (T.81 F.1.2.3).
class BitWriter {
 public:
  explicit BitWriter(std::vector<uint8_t>* out) : out_(out) {}

  void put(uint32_t value, int n) {
    acc_ = (acc_ << n) | (value & ((1u << n) - 1));
    bits_ += n;
    while (bits_ >= 8) {
      bits_ -= 8;
      emit(static_cast<uint8_t>(acc_ >> bits_));
    }
  }

  // Appends n whole bytes of data (8n bits) after the pending bits: a shifted
  // copy and one search for bytes to stuff, not a put() per byte, because the
  // rows a crop keeps can be hundreds of kilobytes.
  void put_bytes(const uint8_t* src, size_t n) {
    if (n == 0) {
      return;
    }
    const size_t start = out_->size();
    out_->resize(start + n);
    uint8_t* dst = out_->data() + start;
    const int p = bits_;
    if (p == 0) {
      std::memcpy(dst, src, n);
    } else {
      const uint32_t mask = (1u << p) - 1;
      dst[0] = static_cast<uint8_t>(((acc_ & mask) << (8 - p)) | (src[0] >> p));
      for (size_t i = 1; i < n; ++i) {
        dst[i] = static_cast<uint8_t>((src[i - 1] << (8 - p)) | (src[i] >> p));
      }
      acc_ = src[n - 1] & mask;
    }
    stuff_from(start);
  }

  void finish() {
    if (bits_ > 0) {
      put((1u << (8 - bits_)) - 1, 8 - bits_);
    }
  }

 private:
  // Inserts a 0x00 after every 0xFF written from `start` on. The bytes
  // between two 0xFF move as one block, last block first, so that every byte
  // moves once: a byte loop here cost as much as the shift itself.
  void stuff_from(size_t start) {
    marks_.clear();
    for (const uint8_t* p = out_->data() + start, *end = out_->data() + out_->size();
         (p = static_cast<const uint8_t*>(std::memchr(p, 0xFF, static_cast<size_t>(end - p)))) != nullptr;
         ++p) {
      marks_.push_back(static_cast<size_t>(p - out_->data()));
    }
    if (marks_.empty()) {
      return;
    }
    size_t run_end = out_->size();
    out_->resize(run_end + marks_.size());
    uint8_t* data = out_->data();
    // The bytes after the k-th 0xFF (k from 0) move k + 1 places right, up to
    // and including the next 0xFF; the 0x00 goes right after the moved 0xFF.
    for (size_t k = marks_.size(); k-- > 0;) {
      const size_t run_begin = marks_[k] + 1;
      std::memmove(data + run_begin + k + 1, data + run_begin, run_end - run_begin);
      data[run_begin + k] = 0x00;
      run_end = run_begin;
    }
  }

  void emit(uint8_t b) {
    out_->push_back(b);
    if (b == 0xFF) {
      out_->push_back(0x00);
    }
  }

  std::vector<uint8_t>* out_;
  std::vector<size_t> marks_;  // stuff_from's 0xFF positions, kept for the next call.
  uint64_t acc_ = 0;
  int bits_ = 0;
};

}  // namespace huffman
}  // namespace custom_op
