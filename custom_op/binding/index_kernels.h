// The operators' kernels of the MCU index (csrc/index_builder.h): building
// a file's index, the process's count of how decodes handed an index went
// (csrc/index_stats.h), and the decode options that carry an index. Included
// only by decode_and_crop_jpeg.cpp, the extension's one translation unit
// (which registers them), hence the anonymous namespace.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "binding/errors.h"
#include "binding/stable_tensors.h"
#include "csrc/index_stats.h"
#include "csrc/jpeg_decoder.h"
#include "csrc/mcu_index.h"

namespace {

// `options` with the serialized MCU index in `index`, if any (its bytes
// outlive the call: the tensor is the caller's). An index whose entries would
// take more than the decode's max_memory, or whose header is invalid, is
// handed over with no bytes: the decoder refuses that at once, counted as a
// refused index, and decodes the ordinary way without allocating the entries.
custom_op::DecodeOptions with_index(custom_op::DecodeOptions options, const std::optional<Tensor>& index) {
  if (index.has_value()) {
    const ByteSpan bytes = span_of_tensor(*index);
    const bool fits = custom_op::mcu_index::entries_fit(
        bytes.data, bytes.size, static_cast<uint64_t>(options.limits.max_memory));
    options.index = bytes.data;
    options.index_size = fits ? bytes.size : 0;
  }
  return options;
}

// Reads the header for the index: not strict, as the header-only operators.
custom_op::DecodeOptions index_header_options() {
  custom_op::DecodeOptions options;
  options.strict = false;
  return options;
}

// The serialized MCU index of the file (entries as dense as index_builder.h's
// budget allows) as a uint8 tensor, or an empty one when the file cannot be
// indexed: progressive or arithmetic-coded, with restart markers, several
// scans, or entropy-coded data that the index's own Huffman pass does not
// accept.
Tensor jpeg_index_kernel(Tensor data) {
  const ByteSpan bytes = span_of_tensor(data);
  std::vector<uint8_t> index;
  bool indexable = false;
  custom_op::Status status;
  try {
    custom_op::JpegDecoder decoder(bytes.data, bytes.size, index_header_options());
    custom_op::JpegInfo info;
    status = decoder.read_header(&info);
    indexable = status.ok() && decoder.build_index(/*mcus_per_entry=*/0, &index);
  } catch (...) {
    status = status_of_current_exception();
  }
  if (!status.ok()) {
    raise_status("jpeg_index", status);
  }
  const Tensor out = empty_bytes({indexable ? static_cast<int64_t>(index.size()) : 0});
  std::copy(index.begin(), index.end(), bytes_of(out));
  return out;
}

// The counts of csrc/index_stats.h, in the order of IndexOutcome
// (INDEX_OUTCOMES in custom_op/_core/_fakes.py names them in that order).
std::vector<int64_t> index_stats_kernel() {
  std::vector<int64_t> counts;
  for (int k = 0; k < static_cast<int>(custom_op::IndexOutcome::kCount); ++k) {
    counts.push_back(custom_op::index_outcome_count(static_cast<custom_op::IndexOutcome>(k)));
  }
  return counts;
}

}  // namespace
