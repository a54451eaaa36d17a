// How decodes that were handed an MCU-row index went: served from the index,
// or sent down the ordinary path and why. Process-wide counters, read by
// custom_op.index_stats() through the binding, so that a fallback is visible
// rather than a silent loss of speed. The binding returns them in the order
// of IndexOutcome; their names live once, in custom_op/_core/_fakes.py
// (INDEX_OUTCOMES), in that order.
#pragma once

#include <atomic>
#include <cstdint>

namespace custom_op {

enum class IndexOutcome {
  kIndexed,         // Decoded from the cut-out the index made.
  kUnneeded,        // The rows above the window are too few to be worth a cut-out.
  kNotIndexable,    // The file has no single baseline Huffman scan without restart markers.
  kRefused,         // The index is malformed, or describes another file or another version of it.
  kCutFailed,       // The index's positions do not fit the data, or the tables cannot make the synthetic row.
  kCutDecodeFailed, // libjpeg rejected the cut-out (decoded strictly).
  kCount,
};

inline std::atomic<int64_t>* index_counters() {
  static std::atomic<int64_t> counters[static_cast<int>(IndexOutcome::kCount)] = {};
  return counters;
}

inline void count_index_outcome(IndexOutcome outcome) {
  index_counters()[static_cast<int>(outcome)].fetch_add(1, std::memory_order_relaxed);
}

inline int64_t index_outcome_count(IndexOutcome outcome) {
  return index_counters()[static_cast<int>(outcome)].load(std::memory_order_relaxed);
}

}  // namespace custom_op
