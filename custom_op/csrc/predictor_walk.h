// The synthetic MCUs of an index cut-out (index_seek.h): DC-only blocks whose
// differences walk each component's DC predictor from one value to another,
// coded with the scan's own Huffman tables. A cut-out needs them wherever its
// data jumps over MCUs of the file: at its start, where a scan's predictors
// are 0, and in front of each kept row's segment, whose first block codes a
// difference from the predictor the skipped MCUs left behind.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "huffman.h"
#include "index_builder.h"
#include "mcu_index.h"

namespace custom_op {
namespace mcu_index {


// The DC differences of one component's synthetic blocks: `blocks` values,
// each of a category the DC table codes, summing to `target` (how far the
// blocks move the predictor).
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
        intervals_[interval_count_++] = {lo, hi};
        if (s > 0) {
          intervals_[interval_count_++] = {-hi, -lo};
        }
      }
    }
    zero_codable_ = codes.length[0] != 0;
    for (int tail = 1; tail <= 3 && tail <= blocks && !ok_; ++tail) {
      int32_t head[3];
      if (sum_of(target, tail, head) && zeros_for(blocks - tail)) {
        // The head first, then the zero-sum triple zeros_for may have set.
        for (int i = value_count_ - 1; i >= 0; --i) {
          values_[i + tail] = values_[i];
        }
        std::copy(head, head + tail, values_);
        value_count_ += tail;
        ok_ = true;
      }
    }
  }

  bool ok() const { return ok_; }

  // The difference of the next block, in order.
  int32_t next() {
    if (next_ < value_count_) {
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
  bool sum_of(int32_t target, int count, int32_t* out) const {
    const int n = interval_count_;
    int pick[3] = {0, 0, 0};
    int combinations = 1;
    for (int i = 0; i < count; ++i) {
      combinations *= n;
    }
    for (int k = 0; k < combinations; ++k) {
      int rest = k;
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
        out[i] = std::max(intervals_[pick[i]].lo, remaining - rest_hi);
        remaining -= out[i];
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
    if (interval_count_ == 0) {
      return false;
    }
    pair_value_ = intervals_[0].lo;
    if (count % 2 == 0) {
      return true;
    }
    if (count < 3 || !sum_of(0, 3, values_)) {
      return false;
    }
    value_count_ = 3;
    return true;
  }

  // {0} and the two signs of categories 1..11: at most 23 intervals.
  Interval intervals_[23] = {};
  int interval_count_ = 0;
  // A head of up to 3 values, then a zero-sum triple.
  int32_t values_[6] = {};
  int value_count_ = 0;
  int next_ = 0;
  bool zero_codable_ = false;
  bool ok_ = false;
  int32_t pair_value_ = 0;
  int32_t pair_sign_ = -1;
};

// The scan's codes, made once per cut-out: the DC codes for the walks, and the
// AC table's EOB, without which no block can end after its DC.
struct SyntheticCodes {
  huffman::Codes dc[kMaxComponents];
  huffman::Codes ac[kMaxComponents];

  bool make(const ScanLayout& scan) {
    for (int c = 0; c < scan.components; ++c) {
      if (!huffman::make_codes(scan.dc[c], &dc[c]) || !huffman::make_codes(scan.ac[c], &ac[c]) ||
          ac[c].length[0x00] == 0) {
        return false;
      }
    }
    return true;
  }
};

// Whether `mcus` synthetic MCUs can walk every component's predictor from
// `from` to `to` (scan.components values each).
inline bool can_walk(const ScanLayout& scan, const SyntheticCodes& codes, int64_t mcus,
                     const int32_t* from, const int32_t* to) {
  for (int c = 0; c < scan.components; ++c) {
    if (!PredictorWalk(to[c] - from[c], mcus * scan.blocks_per_mcu(c), codes.dc[c]).ok()) {
      return false;
    }
  }
  return true;
}

// Writes `mcus` synthetic MCUs, every block in scan order, walking each
// component's predictor from `from` to `to`; false when the tables cannot.
inline bool write_synthetic_mcus(const ScanLayout& scan, const SyntheticCodes& codes, int64_t mcus,
                                 const int32_t* from, const int32_t* to,
                                 huffman::BitWriter* writer) {
  std::vector<PredictorWalk> walks;
  walks.reserve(static_cast<size_t>(scan.components));
  for (int c = 0; c < scan.components; ++c) {
    walks.emplace_back(to[c] - from[c], mcus * scan.blocks_per_mcu(c), codes.dc[c]);
    if (!walks.back().ok()) {
      return false;
    }
  }
  for (int64_t mcu = 0; mcu < mcus; ++mcu) {
    for (int c = 0; c < scan.components; ++c) {
      const huffman::Codes& dc = codes.dc[c];
      for (int b = scan.blocks_per_mcu(c); b > 0; --b) {
        const int32_t diff = walks[c].next();
        const int32_t magnitude = diff < 0 ? -diff : diff;
        int category = 0;
        while ((1 << category) <= magnitude) {
          ++category;
        }
        writer->put(dc.code[category], dc.length[category]);
        if (category > 0) {
          // Negative differences are sent as diff - 1 in `category` bits (T.81 F.1.2.1).
          writer->put(static_cast<uint32_t>(diff < 0 ? diff - 1 : diff), category);
        }
        writer->put(codes.ac[c].code[0x00], codes.ac[c].length[0x00]);
      }
    }
  }
  return true;
}

}  // namespace mcu_index
}  // namespace custom_op
