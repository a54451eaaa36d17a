// The operators' kernels that read a file without decoding its pixels: its
// size, its restart-segment grid, its MCU-row index (csrc/index_builder.h),
// and the process's count of how decodes handed an index went
// (csrc/index_stats.h). Included only by decode_and_crop_jpeg.cpp, the
// extension's one translation unit (which registers them), hence the
// anonymous namespace.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "binding/errors.h"
#include "binding/stable_tensors.h"
#include "csrc/index_stats.h"
#include "csrc/jpeg_decoder.h"

namespace {

// For the functions that read only the header. Not strict: a warning in the
// header changes neither the size nor the layout, and the decode functions
// still raise for it when asked to be strict.
custom_op::DecodeOptions header_only_options() {
  custom_op::DecodeOptions options;
  options.strict = false;
  return options;
}

custom_op::JpegInfo read_header_or_raise(const char* function, custom_op::JpegDecoder* decoder) {
  custom_op::JpegInfo info;
  const custom_op::Status status = decoder->read_header(&info);
  if (!status.ok()) {
    raise_status(function, status);
  }
  return info;
}

// (height, width, channels) from the header.
std::vector<int64_t> jpeg_size_kernel(Tensor data) {
  const ByteSpan bytes = span_of_tensor(data);
  custom_op::JpegDecoder decoder(bytes.data, bytes.size, header_only_options());
  const custom_op::JpegInfo info = read_header_or_raise("jpeg_size", &decoder);
  return {info.height, info.width, info.channels};
}

// (height, width, channels) of every file, 3 numbers each, or -1, -1, -1
// for a file whose header cannot be read (its loader reads it again, one at
// a time, for the error that names it). One dispatch for a dataset's batch,
// where a call per file cost more than the header read.
std::vector<int64_t> jpeg_sizes_kernel(std::vector<Tensor> datas) {
  std::vector<int64_t> sizes;
  sizes.reserve(3 * datas.size());
  for (const Tensor& data : datas) {
    const ByteSpan bytes = span_of_tensor(data);
    custom_op::JpegInfo info;
    custom_op::Status status;
    try {
      custom_op::JpegDecoder decoder(bytes.data, bytes.size, header_only_options());
      status = decoder.read_header(&info);
    } catch (...) {
      status = status_of_current_exception();
    }
    const bool ok = status.ok();
    sizes.insert(sizes.end(), {ok ? info.height : -1, ok ? info.width : -1, ok ? info.channels : -1});
  }
  return sizes;
}

// The restart-segment grid decode_and_crop_jpeg seeks with, as
// [interval, mcus_per_row, mcu_rows, mcu_height, mcu_width], or [] for none.
std::vector<int64_t> restart_geometry_kernel(Tensor data) {
  const ByteSpan bytes = span_of_tensor(data);
  custom_op::JpegDecoder decoder(bytes.data, bytes.size, header_only_options());
  read_header_or_raise("seekable", &decoder);
  custom_op::restarts::ScanGeometry g;
  if (!decoder.restart_geometry(&g)) {
    return {};
  }
  return {g.interval, g.mcus_per_row, g.mcu_rows, g.mcu_height, g.mcu_width};
}

// The serialized MCU-row index of the file (one entry per MCU row) as a
// uint8 tensor, or an empty one when the file cannot be indexed: progressive
// or arithmetic-coded, with restart markers, several scans, or entropy-coded
// data that the index's own Huffman pass does not accept.
Tensor jpeg_index_kernel(Tensor data) {
  const ByteSpan bytes = span_of_tensor(data);
  std::vector<uint8_t> index;
  bool indexable = false;
  custom_op::Status status;
  try {
    custom_op::JpegDecoder decoder(bytes.data, bytes.size, header_only_options());
    custom_op::JpegInfo info;
    status = decoder.read_header(&info);
    indexable = status.ok() && decoder.build_index(/*rows_per_entry=*/1, &index);
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
// (custom_op/_decode.py names them in that order).
std::vector<int64_t> index_stats_kernel() {
  std::vector<int64_t> counts;
  for (int k = 0; k < static_cast<int>(custom_op::IndexOutcome::kCount); ++k) {
    counts.push_back(custom_op::index_outcome_count(static_cast<custom_op::IndexOutcome>(k)));
  }
  return counts;
}

}  // namespace
