// The bit-level code of the MCU index's entries (mcu_index.h): an adaptive
// Golomb-Rice code of non-negative residuals, written most significant bit
// first. A residual v with parameter k is v >> k in unary (that many 0 bits,
// then a 1) followed by the k low bits of v. The parameter follows the
// magnitudes just coded in the same context: the smallest k with
// count << k >= sum of recent residuals, the sum and count halved every
// kRiceWindow codes so that the parameter follows a photo's busy and quiet
// stretches. A quotient of kRiceEscape or more (a residual far above the
// recent ones) is written as kRiceEscape 0 bits and a 1, then the residual's
// bit length in 6 bits and its bits below the leading one, so that a hostile
// index cannot make the reader count zeros for long and every code stays
// under 100 bits.
//
// The reader checks every read against the end of its bytes: a code that
// runs past them fails instead of reading on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace custom_op {
namespace index_coding {

constexpr int kRiceEscape = 24;
constexpr int kRiceWindow = 32;
// The longest residual the code carries: a bit length that fits one read of
// the reader's buffer (56 bits at least after a refill, while bytes remain).
constexpr int kMaxResidualBits = 56;

inline int bit_length(uint64_t v) { return v == 0 ? 0 : 64 - __builtin_clzll(v); }

// One context's running statistics and the parameter they give.
class RiceContext {
 public:
  // With sum and count of bit lengths s and c, count << (s - c + 1) > sum
  // and count << (s - c - 1) < sum: the parameter is s - c or s - c + 1.
  int parameter() const {
    int k = bit_length(sum_) - bit_length(count_);
    if (k < 0) {
      return 0;
    }
    if ((count_ << k) < sum_) {
      ++k;
    }
    return k < kMaxResidualBits ? k : kMaxResidualBits;
  }

  // Residuals are under 2^kMaxResidualBits and the sum halves every
  // kRiceWindow / 2 of them: it stays far from overflow.
  void update(uint64_t residual) {
    sum_ += residual;
    if (++count_ == kRiceWindow) {
      sum_ >>= 1;
      count_ >>= 1;
    }
  }

 private:
  uint64_t sum_ = 4;
  uint64_t count_ = 1;
};

// Appends codes to a byte vector, most significant bit first.
class BitWriter {
 public:
  explicit BitWriter(std::vector<uint8_t>* out) : out_(out) {}

  // The low `n` bits of `v`, n <= 56: with under 8 bits pending, they fit
  // the 64-bit buffer together.
  void bits(uint64_t v, int n) {
    if (n == 0) {
      return;
    }
    buffer_ = (buffer_ << n) | (v & ((uint64_t{1} << n) - 1));
    pending_ += n;
    while (pending_ >= 8) {
      pending_ -= 8;
      out_->push_back(static_cast<uint8_t>(buffer_ >> pending_));
    }
  }

  void zeros(int n) { bits(0, n); }

  // Pads the last byte with 0 bits.
  void finish() {
    if (pending_ > 0) {
      out_->push_back(static_cast<uint8_t>(buffer_ << (8 - pending_)));
      pending_ = 0;
    }
  }

 private:
  std::vector<uint8_t>* out_;
  uint64_t buffer_ = 0;  // The low `pending_` bits are not written yet.
  int pending_ = 0;
};

// Counts the bits a BitWriter would write, for sizes measured without
// writing (index_builder.h's budget).
class BitCounter {
 public:
  void bits(uint64_t, int n) { count_ += static_cast<uint64_t>(n); }
  void zeros(int n) { count_ += static_cast<uint64_t>(n); }
  void finish() {}
  uint64_t bytes() const { return (count_ + 7) / 8; }

 private:
  uint64_t count_ = 0;
};

// Writes `residual` (under 2^kMaxResidualBits) with the context's parameter,
// then adapts the context. `Writer`: BitWriter or BitCounter.
template <typename Writer>
void put_rice(uint64_t residual, RiceContext* context, Writer* out) {
  const int k = context->parameter();
  const uint64_t quotient = residual >> k;
  if (quotient < kRiceEscape) {
    out->zeros(static_cast<int>(quotient));
    out->bits(1, 1);
    out->bits(residual, k);
  } else {
    const int length = bit_length(residual);
    out->zeros(kRiceEscape);
    out->bits(1, 1);
    out->bits(static_cast<uint64_t>(length), 6);
    out->bits(residual, length - 1);  // The leading 1 is implied.
  }
  context->update(residual);
}

// Reads what BitWriter wrote, bounds-checked: every read fails rather than
// look past the last byte.
class BitReader {
 public:
  BitReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  // `n` bits (n <= 56) into `v`.
  bool bits(int n, uint64_t* v) {
    refill();
    if (count_ < n) {
      return false;
    }
    *v = n == 0 ? 0 : buffer_ >> (64 - n);
    consume(n);
    return true;
  }

  // The number of 0 bits before the next 1 (which it consumes), failing when
  // it would exceed `limit` or the data ends first.
  bool unary(int limit, int* zeros) {
    int seen = 0;
    for (;;) {
      refill();
      if (count_ == 0) {
        return false;
      }
      // Only a 1 within count_ ends the run (see buffer_).
      const int lead = buffer_ == 0 ? 64 : __builtin_clzll(buffer_);
      if (lead < count_) {
        seen += lead;
        consume(lead + 1);
        break;
      }
      seen += count_;
      consume(count_);
      if (seen > limit) {
        return false;
      }
    }
    *zeros = seen;
    return seen <= limit;
  }

  // A code of quotient under kRiceEscape and parameter k read at once when
  // the buffer holds all of it (nearly every code), into `residual`; false,
  // having read nothing, otherwise.
  bool short_code(int k, uint64_t* residual) {
    refill();
    const int lead = buffer_ == 0 ? 64 : __builtin_clzll(buffer_);
    if (lead >= kRiceEscape || lead + 1 + k > count_) {
      return false;
    }
    const uint64_t rest = buffer_ << lead << 1;
    *residual = static_cast<uint64_t>(lead) << k | (k == 0 ? 0 : rest >> (64 - k));
    consume(lead + 1 + k);
    return true;
  }

  // Whether everything was read but the last byte's padding, all 0 bits.
  bool at_padded_end() const { return pos_ == size_ && count_ < 8 && buffer_ == 0; }

 private:
  // Tops the buffer up to 56 bits or more while bytes remain: one 8-byte
  // load where 8 remain (its bits past the whole bytes taken land where
  // those bytes' own bits will), else byte by byte.
  void refill() {
    if (count_ >= 56) {
      return;
    }
    if (size_ - pos_ >= 8) {
      uint64_t word = 0;
      std::memcpy(&word, data_ + pos_, 8);  // One load; the stream is big-endian.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      word = __builtin_bswap64(word);
#endif
      buffer_ |= word >> count_;
      const int taken = (63 - count_) >> 3;
      pos_ += static_cast<size_t>(taken);
      count_ += 8 * taken;
      return;
    }
    while (count_ <= 56 && pos_ < size_) {
      buffer_ |= static_cast<uint64_t>(data_[pos_++]) << (56 - count_);
      count_ += 8;
    }
  }

  void consume(int n) {
    buffer_ = n >= 64 ? 0 : buffer_ << n;
    count_ -= n;
  }

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  // The next bits, left-aligned; the bits past count_ are 0 or those the
  // next bytes hold (so a 1 found past count_ is not taken for a code's).
  uint64_t buffer_ = 0;
  int count_ = 0;
};

// Reads one residual written by put_rice with the same context, then adapts
// the context. Always inlined: a call keeps the reader's buffer in memory,
// and every code then waits for the previous one's store.
[[gnu::always_inline]] inline bool get_rice(RiceContext* context, BitReader* in, uint64_t* residual) {
  const int k = context->parameter();
  if (in->short_code(k, residual)) {
    context->update(*residual);
    return true;
  }
  int quotient = 0;
  if (!in->unary(kRiceEscape, &quotient)) {
    return false;
  }
  if (quotient < kRiceEscape) {
    uint64_t low = 0;
    if (!in->bits(k, &low)) {
      return false;
    }
    *residual = static_cast<uint64_t>(quotient) << k | low;
  } else {
    uint64_t length = 0, low = 0;
    if (!in->bits(6, &length) || length == 0 || length > kMaxResidualBits ||
        !in->bits(static_cast<int>(length) - 1, &low)) {
      return false;
    }
    *residual = uint64_t{1} << (length - 1) | low;
  }
  context->update(*residual);
  return true;
}

}  // namespace index_coding
}  // namespace custom_op
