// Baseline JPEG Huffman coding, both ways, for the MCU-row index: reading the
// entropy-coded data bit by bit (index_builder.h walks every MCU to find where
// rows begin) and writing codes (index_seek.h writes a synthetic MCU row and
// re-packs the rows a crop needs). Written from the JPEG specification
// (ITU-T T.81, Annex C and F.2.2): canonical codes assigned in order of length.
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
// by comparing with the largest code of each length.
constexpr int kLookBits = 9;

struct Decoder {
  // (length << 8) | symbol for every kLookBits-bit prefix whose code is that
  // short, 0 otherwise.
  uint16_t fast[1 << kLookBits] = {0};
  int32_t max_code[18] = {0};    // The largest code of each length, -1 if none.
  int32_t value_offset[18] = {0};  // symbols[value_offset[l] + code] decodes a code of length l.
  uint8_t symbols[256] = {0};
  // For an AC table, what a kLookBits-bit prefix does when its code and the
  // coefficient's bits both fit in it: skip `bits` bits and move `advance`
  // coefficients on (run + 1, 16 for ZRL, 64 for EOB). advance 0: decode()
  // the symbol instead. Walking blocks without their values needs no more.
  uint8_t skip_bits[1 << kLookBits] = {0};
  uint8_t skip_advance[1 << kLookBits] = {0};
};

inline bool make_decoder(const Table& table, Decoder* d) {
  Codes unused;
  if (!make_codes(table, &unused)) {
    return false;
  }
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
  for (int look = 0; look < (1 << kLookBits); ++look) {
    const int length = d->fast[look] >> 8;
    const int symbol = d->fast[look] & 0xFF;
    const int run = symbol >> 4;
    const int size = symbol & 15;
    if (length == 0 || length + size > kLookBits) {
      continue;
    }
    d->skip_bits[look] = static_cast<uint8_t>(length + size);
    d->skip_advance[look] = static_cast<uint8_t>(size != 0 ? run + 1 : run == 15 ? 16 : 64);
  }
  return true;
}

// Reads entropy-coded data from `begin` (the first byte after SOS) on,
// removing the stuffed 0x00 after every data 0xFF and stopping at the first
// marker. Knows the position of its next bit in the file's own bytes (see
// mcu_index.h), which is why it loads one byte at a time.
class BitReader {
 public:
  BitReader(const uint8_t* data, size_t size, size_t begin)
      : data_(data), size_(size), begin_(begin), pos_(begin) {}

  // The next bit's position: 8 * (file byte - begin) + bit. Loads a byte
  // first when none is buffered, so that the bit's byte is a loaded one.
  uint64_t position() {
    fill(8);
    if (bits_ == 0) {
      return (marker_pos_ - begin_) * 8;
    }
    const uint64_t unread = loaded_ * 8 - static_cast<uint64_t>(bits_);
    const uint64_t byte = unread >> 3;
    return (raw_of_[byte & 15] - begin_) * 8 + (unread & 7);
  }

  // Bits that are loaded or can be: false at a marker or the data's end.
  bool fill(int wanted) {
    while (bits_ < wanted && !at_marker_) {
      if (bits_ > 56) {
        break;
      }
      if (pos_ >= size_) {
        at_marker_ = true;
        marker_pos_ = size_;
        break;
      }
      const uint8_t b = data_[pos_];
      if (b == 0xFF) {
        if (pos_ + 1 < size_ && data_[pos_ + 1] == 0x00) {
          raw_of_[loaded_ & 15] = pos_;
          pos_ += 2;
        } else {
          at_marker_ = true;
          marker_pos_ = pos_;
          break;
        }
      } else {
        raw_of_[loaded_ & 15] = pos_;
        ++pos_;
      }
      acc_ = (acc_ << 8) | b;
      bits_ += 8;
      ++loaded_;
    }
    return bits_ >= wanted;
  }

  // The next n (1..16) bits, zeros beyond the data's end.
  uint32_t peek(int n) {
    if (bits_ < n) {
      fill(n);
    }
    if (bits_ >= n) {
      return static_cast<uint32_t>(acc_ >> (bits_ - n)) & ((1u << n) - 1);
    }
    return static_cast<uint32_t>(acc_ << (n - bits_)) & ((1u << n) - 1);
  }

  bool skip(int n) {
    if (bits_ < n && !fill(n)) {
      return false;
    }
    bits_ -= n;
    return true;
  }

  // One symbol of `d`, or -1 for a code that is not in the table or runs
  // past the data.
  int decode(const Decoder& d) {
    const uint32_t look = peek(kLookBits);
    const uint16_t fast = d.fast[look];
    if (fast != 0) {
      return skip(fast >> 8) ? (fast & 0xFF) : -1;
    }
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

  // Moves past one AC coefficient (or run, or EOB) of `d`: returns how many
  // coefficients it advances (as skip_advance), or 0 for a code that is not
  // in the table or runs past the data.
  int skip_coefficient(const Decoder& d) {
    const uint32_t look = peek(kLookBits);
    const int bits = d.skip_bits[look];
    if (bits != 0 && bits <= bits_) {
      bits_ -= bits;
      return d.skip_advance[look];
    }
    const int symbol = decode(d);
    if (symbol < 0) {
      return 0;
    }
    const int run = symbol >> 4;
    const int size = symbol & 15;
    if (size == 0) {
      return run == 15 ? 16 : 64;
    }
    return skip(size) ? run + 1 : 0;
  }

  // `n` (0..16) bits as a signed coefficient value (T.81 F.2.2.1, EXTEND).
  bool receive(int n, int32_t* value) {
    if (n == 0) {
      *value = 0;
      return true;
    }
    const int32_t v = static_cast<int32_t>(peek(n));
    if (!skip(n)) {
      return false;
    }
    *value = v < (1 << (n - 1)) ? v - (1 << n) + 1 : v;
    return true;
  }

  // Where the data ends, after fill() reached it: the marker's offset, and
  // how many data bytes (whole or partly) remain unread.
  bool at_marker() const { return at_marker_; }
  size_t marker_pos() const { return marker_pos_; }
  int buffered_bits() const { return bits_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t begin_;
  size_t pos_;
  uint64_t acc_ = 0;
  int bits_ = 0;
  uint64_t loaded_ = 0;
  size_t raw_of_[16] = {0};  // The file offset of the last 16 loaded data bytes.
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
