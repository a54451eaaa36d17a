// The binding of custom_op: the operators' kernels and their registration.
// A kernel validates what it is handed, has one image decoded
// (binding/window_decode.h, over the torch-free core in csrc/) or a batch
// (binding/batch.h), and turns a failed Status into a tagged exception
// (binding/errors.h) that the Python layer gives its Python type back.
// Argument parsing with friendly messages happens first in
// custom_op/_decode/_single.py; the checks here keep direct calls safe.
//
// Two ABIs, no C++ one: the operators (torch.ops.custom_op_jpeg._*) are built on
// torch's stable ABI (STABLE_TORCH_LIBRARY, torch::stable::Tensor, ATen
// kernels called through the dispatcher by name in binding/aten_calls.h), so
// one binary serves every torch from TORCH_TARGET_VERSION on; the Python
// module that loading this file creates is on CPython's limited API
// (binding/python_module.h), so it serves every CPython from 3.10 on. Encoded bytes reach the operators as
// tensors (custom_op/_core/_native.py wraps bytes with torch.frombuffer), and torch
// calls an operator with the GIL released, so the decodes run without it.
// Neither pybind11 nor torch's C++ API is used.
#include "binding/batch.h"
#include "binding/errors.h"
#include "binding/index_kernels.h"
#include "binding/python_module.h"
#include "binding/stable_tensors.h"
#include "binding/thread_pool.h"
#include "binding/window_decode.h"
#include "csrc/grid_crop.h"
#include "csrc/jpeg_decoder.h"
#include "csrc/prepare.h"

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#ifndef CUSTOM_OP_NAMESPACE
#error "CUSTOM_OP_NAMESPACE names the operators' namespace: _build_config.define_macros defines it"
#endif
// torch's registration macros paste their namespace argument into names, which
// would take the macro's name itself; these expand CUSTOM_OP_NAMESPACE first.
#define CUSTOM_OP_LIBRARY(ns, m) STABLE_TORCH_LIBRARY(ns, m)
#define CUSTOM_OP_LIBRARY_IMPL(ns, key, m) STABLE_TORCH_LIBRARY_IMPL(ns, key, m)

namespace {


// For the functions that read only the header. Not strict: a warning in the
// header changes neither the size nor the layout, and the decode functions
// still raise for it when asked to be strict. `max_pixels` is the caller's,
// so that a header is refused (or accepted) when read by the limit its decode
// will have.
custom_op::DecodeOptions header_only_options(int64_t max_pixels = custom_op::Limits{}.max_pixels) {
  if (max_pixels < 1) {
    throw_value_error("max_pixels must be positive, got " + std::to_string(max_pixels));
  }
  custom_op::DecodeOptions options;
  options.strict = false;
  options.limits.max_pixels = max_pixels;
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


// One image: the result, or the failure raised with `function`'s name.
Tensor decode_single(const char* function, const Tensor& data, const custom_op::Window& window,
                     int64_t mode, const custom_op::DecodeOptions& options,
                     const ResizeRequest* resize, bool contiguous,
                     const custom_op::BoxInWindow* box = nullptr) {
  const ByteSpan bytes = span_of_tensor(data);
  Tensor out;
  const custom_op::Status status = decode_one(bytes, options, to_mode(mode), pixel_order(contiguous),
                                              window, resize, std::nullopt, &out, box);
  if (!status.ok()) {
    raise_status(function, status);
  }
  return out;
}

// The operators' kernels, in the order of the schemas in STABLE_TORCH_LIBRARY
// below. torch calls them with the GIL released.

Tensor crop_kernel(Tensor data, int64_t y, int64_t x, int64_t h, int64_t w, int64_t mode,
                   bool strict, int64_t max_pixels, int64_t max_scans, bool seek, bool exact_edges,
                   bool contiguous, int64_t max_memory, std::optional<Tensor> index) {
  return decode_single("decode_and_crop_jpeg", data, {y, x, h, w}, mode,
                       with_index(make_options(strict, max_pixels, max_scans, max_memory,
                                               exact_edges, seek), index),
                       /*resize=*/nullptr, contiguous);
}

Tensor resized_crop_kernel(Tensor data, int64_t y, int64_t x, int64_t h, int64_t w,
                           int64_t out_height, int64_t out_width, int64_t scale_num, bool antialias,
                           int64_t mode, bool strict, int64_t max_pixels, int64_t max_scans,
                           bool seek, bool contiguous, int64_t max_memory,
                           std::optional<Tensor> index) {
  const char* function = "decode_and_resized_crop_jpeg";
  const custom_op::Window window{y, x, h, w};
  const ResizeRequest request = make_resize(window, out_height, out_width, scale_num, antialias);
  return decode_single(function, data, window, mode,
                       with_index(make_options(strict, max_pixels, max_scans, max_memory, true, seek),
                                  index),
                       &request, contiguous);
}

Tensor box_resized_kernel(Tensor data, int64_t y, int64_t x, int64_t h, int64_t w,
                          std::vector<double> box, int64_t out_height, int64_t out_width,
                          int64_t scale_num, bool antialias, int64_t mode, bool strict,
                          int64_t max_pixels, int64_t max_scans, bool seek, bool contiguous,
                          int64_t max_memory) {
  const char* function = "decode_box_resized";
  const custom_op::Window window{y, x, h, w};
  const ResizeRequest request = make_resize(window, out_height, out_width, scale_num, antialias);
  if (box.size() != 4 || request.scale_num == 8) {
    throw_value_error("box must hold 4 numbers and scale_num be below 8");
  }
  const custom_op::BoxInWindow in_window{box[0], box[1], box[2], box[3]};
  return decode_single(function, data, window, mode,
                       make_options(strict, max_pixels, max_scans, max_memory, true, seek), &request,
                       contiguous, &in_window);
}

// The rectangle `crop.rect` of the image resized to crop's grid, exactly as
// ATen resizes (csrc/grid_crop.h).
Tensor grid_crop_kernel(Tensor data, int64_t grid_height, int64_t grid_width, int64_t y, int64_t x,
                        int64_t h, int64_t w, bool antialias, int64_t mode, bool strict,
                        int64_t max_pixels, int64_t max_scans, bool seek, bool contiguous,
                        int64_t max_memory) {
  const ByteSpan bytes = span_of_tensor(data);
  const custom_op::GridCrop crop{grid_height, grid_width, {y, x, h, w}, antialias};
  const custom_op::ColorMode color_mode = to_mode(mode);
  const custom_op::DecodeOptions options = make_options(strict, max_pixels, max_scans, max_memory, true, seek);
  Tensor out;
  custom_op::Status status;
  try {
    custom_op::JpegDecoder decoder(bytes.data, bytes.size, options);
    custom_op::JpegInfo info;
    status = decoder.read_header(&info);
    if (status.ok() && !custom_op::grid_crop_fits(crop)) {
      status = custom_op::Status{custom_op::StatusCode::kInvalidArgument,
                                 "the rectangle does not fit in its resize grid"};
    }
    if (status.ok()) {
      out = new_output(custom_op::output_channels(info, color_mode), crop.rect.height,
                       crop.rect.width, pixel_order(contiguous));
      status = custom_op::decode_grid_crop(&decoder, info, crop, color_mode, pixel_order(contiguous),
                                           bytes_of(out));
    }
  } catch (...) {
    status = status_of_current_exception();
  }
  if (!status.ok()) {
    raise_status("decode_grid_crop", status);
  }
  return out;
}

// The batch, new tensors out: each image's result (or a zero placeholder
// where it failed, see binding/batch.h), and the per-image outcomes.
std::tuple<std::vector<Tensor>, Tensor, Tensor> batch_kernel(
    std::vector<Tensor> datas, std::vector<int64_t> boxes, std::vector<int64_t> scale_nums,
    int64_t out_height, int64_t out_width, int64_t mode, bool antialias, bool strict,
    int64_t max_pixels, int64_t max_scans, int64_t num_threads, bool seek, bool contiguous,
    int64_t max_memory, std::vector<int64_t> hflips, std::vector<Tensor> indexes) {
  const BatchRequest request{std::move(datas), std::move(boxes), std::move(scale_nums), out_height,
                             out_width, mode, antialias,
                             make_options(strict, max_pixels, max_scans, max_memory, true, seek),
                             num_threads, contiguous, std::move(hflips), std::move(indexes)};
  std::vector<Tensor> outputs;
  const std::vector<custom_op::Status> statuses = run_batch(request, std::nullopt, &outputs);
  auto [codes, messages] = outcome_tensors(statuses);
  return {outputs, codes, messages};
}

// The batch into the caller's stacked `out` (N x C x H x W, a size given):
// nothing to copy after the decode; a failed image's slice is zeroed.
std::tuple<Tensor, Tensor> batch_into_kernel(
    std::vector<Tensor> datas, std::vector<int64_t> boxes, std::vector<int64_t> scale_nums,
    int64_t out_height, int64_t out_width, int64_t mode, bool antialias, bool strict,
    int64_t max_pixels, int64_t max_scans, int64_t num_threads, bool seek, Tensor out,
    bool contiguous, int64_t max_memory, std::vector<int64_t> hflips, std::vector<Tensor> indexes) {
  const BatchRequest request{std::move(datas), std::move(boxes), std::move(scale_nums), out_height,
                             out_width, mode, antialias,
                             make_options(strict, max_pixels, max_scans, max_memory, true, seek),
                             num_threads, contiguous, std::move(hflips), std::move(indexes)};
  std::vector<Tensor> outputs;
  const std::vector<custom_op::Status> statuses = run_batch(request, out, &outputs);
  auto [codes, messages] = outcome_tensors(statuses);
  return {codes, messages};
}

// (height, width, channels) from the header.
std::vector<int64_t> jpeg_size_kernel(Tensor data, int64_t max_pixels) {
  const ByteSpan bytes = span_of_tensor(data);
  custom_op::JpegDecoder decoder(bytes.data, bytes.size, header_only_options(max_pixels));
  const custom_op::JpegInfo info = read_header_or_raise("jpeg_size", &decoder);
  return {info.height, info.width, info.channels};
}

// (height, width, channels) of every file, 3 numbers each, or 0, 0, 0 for
// a file whose header cannot be read (its loader reads it again, one at a
// time, for the error that names it); no header has a side of 0, and the
// fake kernel's sizes cannot be negative. One dispatch for a dataset's batch,
// where a call per file cost more than the header read.
std::vector<int64_t> jpeg_sizes_kernel(std::vector<Tensor> datas, int64_t max_pixels) {
  const custom_op::DecodeOptions options = header_only_options(max_pixels);
  std::vector<int64_t> sizes;
  sizes.reserve(3 * datas.size());
  for (const Tensor& data : datas) {
    const ByteSpan bytes = span_of_tensor(data);
    custom_op::JpegInfo info;
    custom_op::Status status;
    try {
      custom_op::JpegDecoder decoder(bytes.data, bytes.size, options);
      status = decoder.read_header(&info);
    } catch (...) {
      status = status_of_current_exception();
    }
    const bool ok = status.ok();
    sizes.insert(sizes.end(), {ok ? info.height : 0, ok ? info.width : 0, ok ? info.channels : 0});
  }
  return sizes;
}

// The restart-segment grid decode_and_crop_jpeg seeks with, as
// [interval, mcus_per_row, mcu_rows, mcu_height, mcu_width], all 0 for none:
// always five numbers, so that the fake kernel knows the list's length.
std::vector<int64_t> restart_geometry_kernel(Tensor data) {
  const ByteSpan bytes = span_of_tensor(data);
  custom_op::JpegDecoder decoder(bytes.data, bytes.size, header_only_options());
  read_header_or_raise("seekable", &decoder);
  custom_op::restarts::ScanGeometry g;
  if (!decoder.restart_geometry(&g)) {
    return {0, 0, 0, 0, 0};
  }
  return {g.interval, g.mcus_per_row, g.mcu_rows, g.mcu_height, g.mcu_width};
}

// The lossless rewrite of csrc/prepare.h, as (bytes, restart_interval,
// was_progressive as 0 or 1); custom_op/_core/_native.py turns the uint8
// tensor into bytes. The numbers are SymInts, which a fake kernel may leave
// unbacked (a schema's int or bool would need their values while tracing).
std::tuple<Tensor, int64_t, int64_t> prepare_kernel(Tensor data, int64_t max_pixels, int64_t max_scans,
                                                 int64_t segment_width, int64_t max_memory) {
  if (segment_width < 1) {
    throw_value_error("segment_width must be positive, got " + std::to_string(segment_width));
  }
  const ByteSpan bytes = span_of_tensor(data);
  custom_op::PrepareOptions options;
  options.limits = make_options(true, max_pixels, max_scans, max_memory, true, true).limits;
  options.segment_width = segment_width;
  std::vector<uint8_t> prepared;
  custom_op::PrepareInfo info;
  custom_op::Status status;
  try {
    status = custom_op::prepare_jpeg(bytes.data, bytes.size, options, &prepared, &info);
  } catch (...) {
    status = status_of_current_exception();
  }
  if (!status.ok()) {
    raise_status("prepare_jpeg", status);
  }
  const Tensor out = empty_bytes({static_cast<int64_t>(prepared.size())});
  std::copy(prepared.begin(), prepared.end(), bytes_of(out));
  return {out, info.restart_interval, info.was_progressive ? 1 : 0};
}

std::vector<int64_t> intra_op_threads_kernel(int64_t num_threads) {
  return intra_op_threads_in_batch(num_threads);
}

}  // namespace

// The operators the Python layer calls (custom_op/_core/_native.py) and wraps
// (custom_op/_core/_ops.py defines the public torch.ops.custom_op_jpeg.decode_and_crop_jpeg
// and decode_and_resized_crop_jpeg over the first two, translating the
// tagged errors). The window and output sizes are SymInts, so that
// torch.compile keeps them symbolic (one graph for every random window);
// the kernels see them as plain ints. A scale_num of 0 means "choose by
// the rule" (csrc/scale_rule.h), so no choice in Python specializes a graph.
CUSTOM_OP_LIBRARY(CUSTOM_OP_NAMESPACE, m) {
  m.def("_decode_and_crop_jpeg(Tensor data, SymInt crop_y, SymInt crop_x, SymInt crop_height, "
        "SymInt crop_width, int mode, bool strict, int max_pixels, int max_scans, bool seek, "
        "bool exact_edges, bool contiguous, int max_memory, Tensor? index=None) -> Tensor");
  m.def("_decode_and_resized_crop_jpeg(Tensor data, SymInt crop_y, SymInt crop_x, "
        "SymInt crop_height, SymInt crop_width, SymInt out_height, SymInt out_width, "
        "int scale_num, bool antialias, int mode, bool strict, int max_pixels, int max_scans, "
        "bool seek, bool contiguous, int max_memory, Tensor? index=None) -> Tensor");
  m.def("_decode_box_resized(Tensor data, int crop_y, int crop_x, int crop_height, int crop_width, "
        "float[] box, int out_height, int out_width, int scale_num, bool antialias, int mode, "
        "bool strict, int max_pixels, int max_scans, bool seek, bool contiguous, int max_memory) "
        "-> Tensor");
  m.def("_decode_grid_crop(Tensor data, int grid_height, int grid_width, int crop_y, int crop_x, "
        "int crop_height, int crop_width, bool antialias, int mode, bool strict, int max_pixels, "
        "int max_scans, bool seek, bool contiguous, int max_memory) -> Tensor");
  m.def("_decode_batch(Tensor[] datas, int[] boxes, int[] scale_nums, int out_height, "
        "int out_width, int color_mode, bool antialias, bool strict, int max_pixels, "
        "int max_scans, int num_threads, bool seek, bool contiguous, int max_memory, int[] hflips, "
        "Tensor[] indexes) -> (Tensor[] images, Tensor codes, Tensor messages)");
  m.def("_decode_batch_into(Tensor[] datas, int[] boxes, int[] scale_nums, int out_height, "
        "int out_width, int color_mode, bool antialias, bool strict, int max_pixels, "
        "int max_scans, int num_threads, bool seek, Tensor(a!) out, bool contiguous, int max_memory, "
        "int[] hflips, Tensor[] indexes) -> (Tensor codes, Tensor messages)");
  m.def("_jpeg_size(Tensor data, int max_pixels) -> SymInt[]");
  m.def("_jpeg_sizes(Tensor[] datas, int max_pixels) -> SymInt[]");
  m.def("_restart_geometry(Tensor data) -> SymInt[]");
  m.def("_prepare_jpeg(Tensor data, int max_pixels, int max_scans, int segment_width, "
        "int max_memory) -> (Tensor, SymInt, SymInt)");
  m.def("_intra_op_threads_in_batch(int num_threads) -> SymInt[]");
  m.def("_jpeg_index(Tensor data) -> Tensor");
  m.def("_index_stats() -> SymInt[]");
}

CUSTOM_OP_LIBRARY_IMPL(CUSTOM_OP_NAMESPACE, CPU, m) {
  m.impl("_decode_and_crop_jpeg", TORCH_BOX(&crop_kernel));
  m.impl("_decode_and_resized_crop_jpeg", TORCH_BOX(&resized_crop_kernel));
  m.impl("_decode_box_resized", TORCH_BOX(&box_resized_kernel));
  m.impl("_decode_grid_crop", TORCH_BOX(&grid_crop_kernel));
  m.impl("_decode_batch", TORCH_BOX(&batch_kernel));
  m.impl("_decode_batch_into", TORCH_BOX(&batch_into_kernel));
  m.impl("_jpeg_size", TORCH_BOX(&jpeg_size_kernel));
  m.impl("_jpeg_sizes", TORCH_BOX(&jpeg_sizes_kernel));
  m.impl("_restart_geometry", TORCH_BOX(&restart_geometry_kernel));
  m.impl("_prepare_jpeg", TORCH_BOX(&prepare_kernel));
  m.impl("_jpeg_index", TORCH_BOX(&jpeg_index_kernel));
}

// No tensor argument to dispatch on: the thread probe and the index statistics
// are CompositeExplicitAutograd.
CUSTOM_OP_LIBRARY_IMPL(CUSTOM_OP_NAMESPACE, CompositeExplicitAutograd, m) {
  m.impl("_intra_op_threads_in_batch", TORCH_BOX(&intra_op_threads_kernel));
  m.impl("_index_stats", TORCH_BOX(&index_stats_kernel));
}

PyMODINIT_FUNC PyInit__C() { return create_module(CUSTOM_OP_STRINGIFY(CUSTOM_OP_BUILD_KEY)); }
