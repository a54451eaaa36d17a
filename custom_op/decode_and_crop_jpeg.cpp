// The binding of custom_op: validates what the operators are handed, reads
// the header, allocates the output tensor, runs the torch-free core
// (csrc/jpeg_decoder.h) and turns a failed Status into a tagged exception
// (binding/errors.h) that the Python layer gives its Python type back.
// Argument parsing with friendly messages happens first in
// custom_op/_decode.py; the checks here keep direct calls safe.
//
// Two ABIs, no C++ one: the operators (torch.ops.custom_op_jpeg._*) are built on
// torch's stable ABI (STABLE_TORCH_LIBRARY, torch::stable::Tensor, ATen
// kernels called through the dispatcher by name), so one binary serves every
// torch from TORCH_TARGET_VERSION on; the Python module that loading this
// file creates is on CPython's limited API (binding/python_module.h), so it
// serves every CPython from 3.10 on. Encoded bytes reach the operators as
// tensors (custom_op/_core/_native.py wraps bytes with torch.frombuffer), and torch
// calls an operator with the GIL released, so the decodes run without it.
// Neither pybind11 nor torch's C++ API is used.
#include "binding/errors.h"
#include "binding/file_kernels.h"
#include "binding/python_module.h"
#include "binding/stable_tensors.h"
#include "binding/thread_pool.h"
#include "csrc/grid_crop.h"
#include "csrc/jpeg_decoder.h"
#include "csrc/mirror.h"
#include "csrc/prepare.h"
#include "csrc/scale_rule.h"

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

custom_op::DecodeOptions make_options(bool strict, int64_t max_pixels, int64_t max_scans,
                                     int64_t max_memory, bool exact_edges, bool seek) {
  if (max_pixels < 1 || max_scans < 1 || max_memory < 1) {
    throw_value_error("max_pixels, max_scans and max_memory must be positive");
  }
  custom_op::DecodeOptions options;
  options.strict = strict;
  options.limits.max_pixels = max_pixels;
  options.limits.max_scans = max_scans;
  options.limits.max_memory = max_memory;
  options.exact_edges = exact_edges;
  options.seek = seek;
  return options;
}

custom_op::ColorMode to_mode(int64_t mode) {
  if (mode < 0 || mode > 2) {
    throw_value_error("mode must be 0 (rgb), 1 (gray) or 2 (unchanged), got " + std::to_string(mode));
  }
  return static_cast<custom_op::ColorMode>(mode);
}

// What a resized decode needs besides the bytes and the window.
struct ResizeRequest {
  int64_t out_height;
  int64_t out_width;
  int scale_num;
  bool antialias;
};

// Checks the int64 values before any of them is narrowed; kScaleAuto
// chooses the scale by the one rule (csrc/scale_rule.h).
ResizeRequest make_resize(const custom_op::Window& window, int64_t out_height, int64_t out_width,
                          int64_t scale_num, bool antialias) {
  if (scale_num < custom_op::kScaleAuto || scale_num > 8 || out_height < 1 || out_width < 1 ||
      out_height > 65535 || out_width > 65535) {
    throw_value_error("scale_num must be 1..8 (or 0: the rule chooses) and the output size 1..65535, got scale_num=" +
                      std::to_string(scale_num) + " and " + std::to_string(out_height) + " x " +
                      std::to_string(out_width));
  }
  const int scale = scale_num == custom_op::kScaleAuto
                        ? custom_op::choose_scale_num(static_cast<double>(window.height),
                                                      static_cast<double>(window.width), out_height,
                                                      out_width, antialias)
                        : static_cast<int>(scale_num);
  return ResizeRequest{out_height, out_width, scale, antialias};
}

// The resize of a colour window, on libjpeg's RGBX rows. ATen's uint8 kernel
// works on 4-byte pixels: given CHW planes it unpacks them to RGBA and packs
// its result back byte by byte, after the core split libjpeg's rows into
// those planes. Handed the rows as a channels_last [1, 4, H, W] tensor, it
// skips all three copies (RandomResizedCrop(224) of 500 x 375 files: 1.29 ->
// 1.16 ms). It resizes each channel on its own with the same weights either
// way, so R, G and B come out bit for bit as from the planes; the fourth
// channel is dropped.
custom_op::Status resize_rgbx(custom_op::JpegDecoder* decoder, const custom_op::Window& window,
                              custom_op::ColorMode mode, const ResizeRequest& resize,
                              custom_op::PixelOrder order, const Tensor& target) {
  const custom_op::Status within_limits = decoder->reserve_memory(
      4 * (window.height * window.width + resize.out_height * resize.out_width));
  if (!within_limits.ok()) {
    return within_limits;
  }
  const Tensor rows = empty_bytes({1, window.height, window.width, 4});
  custom_op::Status status = decoder->decode_rgbx(window, mode, bytes_of(rows));
  if (!status.ok()) {
    return status;
  }
  Tensor resized = resize_with_aten(torch::stable::permute(rows, {0, 3, 1, 2}), resize.out_height,
                                    resize.out_width, resize.antialias);
  if (!is_channels_last(resized)) {  // ATen keeps channels_last today; copy if it ever does not
    Tensor packed = torch::stable::permute(empty_bytes({1, resize.out_height, resize.out_width, 4}), {0, 3, 1, 2});
    torch::stable::copy_(packed, resized);
    resized = packed;
  }
  const uint8_t* pixels = bytes_of(resized);
  uint8_t* out = bytes_of(target);
  const size_t plane_size = static_cast<size_t>(resize.out_height * resize.out_width);
  const size_t row_step = order == custom_op::PixelOrder::kPlanar ? resize.out_width : resize.out_width * 3;
  for (int64_t row = 0; row < resize.out_height; ++row) {
    custom_op::detail::emit_row(pixels + row * resize.out_width * 4, custom_op::detail::RowLayout::kRgbx,
                                static_cast<int>(resize.out_width), /*out_channels=*/3, order,
                                out + row * row_step, plane_size);
  }
  return status;
}

// Without DCT scaling: the exact crop, resized by ATen's kernel (see
// resize_with_aten), so the result equals torchvision's resized_crop of a
// full decode, and costs less than the core's portable resampler (which
// serves the reduced scales, where the box has fractional edges that ATen
// cannot take).
custom_op::Status decode_then_resize(custom_op::JpegDecoder* decoder, const custom_op::Window& window,
                                     custom_op::ColorMode mode, int64_t channels,
                                     const ResizeRequest& resize, custom_op::PixelOrder order,
                                     const std::optional<Tensor>& into, Tensor* out) {
  // torchvision returns the input itself for an identity resize.
  const bool identity = resize.out_height == window.height && resize.out_width == window.width;
  if (!identity && decoder->has_rgbx_rows(mode)) {
    *out = output_tensor(into, channels, resize.out_height, resize.out_width, order);
    return resize_rgbx(decoder, window, mode, resize, order, *out);
  }
  if (!identity) {
    const custom_op::Status within_limits = decoder->reserve_memory(channels * window.height * window.width);
    if (!within_limits.ok()) {
      return within_limits;
    }
  }
  const Tensor crop = identity ? output_tensor(into, channels, window.height, window.width, order)
                               : new_output(channels, window.height, window.width, order);
  custom_op::Status status = decoder->decode(window, mode, bytes_of(crop), order);
  if (!status.ok() || identity) {
    *out = crop;
    return status;
  }
  *out = output_tensor(into, channels, resize.out_height, resize.out_width, order);
  Tensor target = torch::stable::unsqueeze(*out, 0);
  torch::stable::copy_(target, resize_with_aten(torch::stable::unsqueeze(crop, 0), resize.out_height,
                                                resize.out_width, resize.antialias));
  return status;
}

// Header, window check, allocation and decode of one image: the exact crop,
// or with `resize` the resized one, written to `into` if it has a value (the
// caller checked its shape). With `box` (and a reduced scale), the output
// covers that box of the window (see JpegDecoder::decode_resized). Never
// throws, so the single calls and the batch's threads all run it.
custom_op::Status decode_one(ByteSpan bytes, const custom_op::DecodeOptions& options,
                             custom_op::ColorMode mode, custom_op::PixelOrder order,
                             const custom_op::Window& window, const ResizeRequest* resize,
                             const std::optional<Tensor>& into, Tensor* out,
                             const custom_op::BoxInWindow* box = nullptr) {
  try {
    custom_op::JpegDecoder decoder(bytes.data, bytes.size, options);
    custom_op::JpegInfo info;
    custom_op::Status status = decoder.read_header(&info);
    if (!status.ok()) {
      return status;
    }
    status = decoder.check_window(window);
    if (!status.ok()) {
      return status;
    }
    const int64_t channels = custom_op::output_channels(info, mode);
    if (resize == nullptr) {
      *out = new_output(channels, window.height, window.width, order);
      return decoder.decode(window, mode, bytes_of(*out), order);
    }
    if (into.has_value() && into->size(0) != channels) {
      return custom_op::Status{custom_op::StatusCode::kInvalidArgument,
                               "the stacked output has the wrong channel count (this is a bug in custom_op)"};
    }
    if (box != nullptr && resize->scale_num == 8) {
      return custom_op::Status{custom_op::StatusCode::kInvalidArgument,
                               "a box needs a reduced scale (this is a bug in custom_op)"};
    }
    if (resize->scale_num == 8) {
      return decode_then_resize(&decoder, window, mode, channels, *resize, order, into, out);
    }
    *out = output_tensor(into, channels, resize->out_height, resize->out_width, order);
    return decoder.decode_resized(window, mode, resize->scale_num,
                                  static_cast<int>(resize->out_height),
                                  static_cast<int>(resize->out_width), resize->antialias,
                                  bytes_of(*out), order, box);
  } catch (...) {  // Report, never unwind into a batch thread.
    return status_of_current_exception();
  }
}

// `options` with the serialized MCU-row index in `index`, if any (its bytes
// outlive the call: the tensor is the caller's).
custom_op::DecodeOptions with_index(custom_op::DecodeOptions options, const std::optional<Tensor>& index) {
  if (index.has_value()) {
    const ByteSpan bytes = span_of_tensor(*index);
    options.index = bytes.data;
    options.index_size = bytes.size;
  }
  return options;
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
                       with_index(make_options(strict, max_pixels, max_scans, max_memory, exact_edges, seek), index),
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
                       with_index(make_options(strict, max_pixels, max_scans, max_memory, true, seek), index),
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

// The decoded [C, H, W] `image` mirrored left to right in place (a new
// output, or a slice of the batch's, in `order`'s layout either way).
void mirror_output(const Tensor& image, custom_op::PixelOrder order) {
  custom_op::mirror_left_right(bytes_of(image), image.size(0), image.size(1), image.size(2), order);
}

// With `out` (and a size), every result is written into its slice of `out`:
// a stacked batch needs no copy after the decode. Scale numerators may be
// kScaleAuto. `hflips` is empty, or one 0/1 per image: 1 mirrors that
// image left to right after its decode, on the thread that decoded it.
std::vector<Tensor> batch_kernel(std::vector<Tensor> datas, std::vector<int64_t> boxes,
                                 std::vector<int64_t> scale_nums, int64_t out_height,
                                 int64_t out_width, int64_t mode, bool antialias, bool strict,
                                 int64_t max_pixels, int64_t max_scans, int64_t num_threads,
                                 bool seek, std::optional<Tensor> out, bool contiguous,
                                 int64_t max_memory, std::vector<int64_t> hflips) {
  const char* function = "decode_and_crop_jpeg_batch";
  const size_t count = datas.size();
  const bool resize = out_height > 0;
  if (boxes.size() != 4 * count || (resize && scale_nums.size() != count) ||
      (!hflips.empty() && hflips.size() != count)) {
    throw_value_error("boxes must hold 4 numbers per image, hflips one per image or none "
                      "(this is a bug in custom_op)");
  }
  std::vector<custom_op::Window> windows;
  std::vector<ResizeRequest> requests;
  std::vector<ByteSpan> inputs;
  for (size_t i = 0; i < count; ++i) {
    windows.push_back({boxes[4 * i], boxes[4 * i + 1], boxes[4 * i + 2], boxes[4 * i + 3]});
    if (resize) {
      requests.push_back(make_resize(windows[i], out_height, out_width, scale_nums[i], antialias));
    }
    inputs.push_back(span_of_tensor(datas[i]));
  }
  const custom_op::ColorMode color_mode = to_mode(mode);
  const custom_op::DecodeOptions options = make_options(strict, max_pixels, max_scans, max_memory, true, seek);
  const custom_op::PixelOrder order = pixel_order(contiguous);
  const std::vector<std::optional<Tensor>> slices = slices_of(out, count, out_height, out_width, order);
  std::vector<Tensor> outputs(count);
  std::vector<custom_op::Status> statuses(count);
  run_in_parallel(count, num_threads, [&](size_t i) {
    statuses[i] = decode_one(inputs[i], options, color_mode, order, windows[i],
                             resize ? &requests[i] : nullptr, slices[i], &outputs[i]);
    if (statuses[i].ok() && !hflips.empty() && hflips[i] != 0) {
      try {
        mirror_output(outputs[i], order);
      } catch (...) {  // Never unwind into a batch thread.
        statuses[i] = status_of_current_exception();
      }
    }
  });
  for (size_t i = 0; i < count; ++i) {
    if (!statuses[i].ok()) {
      raise_status(function, statuses[i], "image " + std::to_string(i) + ": ");
    }
  }
  return outputs;
}

// The lossless rewrite of csrc/prepare.h, as (bytes, restart_interval,
// was_progressive); custom_op/_core/_native.py turns the uint8 tensor into bytes.
std::tuple<Tensor, int64_t, bool> prepare_kernel(Tensor data, int64_t max_pixels, int64_t max_scans,
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
  return {out, info.restart_interval, info.was_progressive};
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
        "int out_width, int mode, bool antialias, bool strict, int max_pixels, int max_scans, "
        "int num_threads, bool seek, Tensor(a!)? out, bool contiguous, int max_memory, "
        "int[] hflips) -> Tensor[]");
  m.def("_jpeg_size(Tensor data) -> int[]");
  m.def("_jpeg_sizes(Tensor[] datas) -> int[]");
  m.def("_restart_geometry(Tensor data) -> int[]");
  m.def("_jpeg_index(Tensor data) -> Tensor");
  m.def("_index_stats() -> int[]");
  m.def("_prepare_jpeg(Tensor data, int max_pixels, int max_scans, int segment_width, "
        "int max_memory) -> (Tensor, int, bool)");
  m.def("_intra_op_threads_in_batch(int num_threads) -> int[]");
}

CUSTOM_OP_LIBRARY_IMPL(CUSTOM_OP_NAMESPACE, CPU, m) {
  m.impl("_decode_and_crop_jpeg", TORCH_BOX(&crop_kernel));
  m.impl("_decode_and_resized_crop_jpeg", TORCH_BOX(&resized_crop_kernel));
  m.impl("_decode_box_resized", TORCH_BOX(&box_resized_kernel));
  m.impl("_decode_grid_crop", TORCH_BOX(&grid_crop_kernel));
  m.impl("_decode_batch", TORCH_BOX(&batch_kernel));
  m.impl("_jpeg_size", TORCH_BOX(&jpeg_size_kernel));
  m.impl("_jpeg_sizes", TORCH_BOX(&jpeg_sizes_kernel));
  m.impl("_restart_geometry", TORCH_BOX(&restart_geometry_kernel));
  m.impl("_jpeg_index", TORCH_BOX(&jpeg_index_kernel));
  m.impl("_prepare_jpeg", TORCH_BOX(&prepare_kernel));
}

// No tensor argument to dispatch on: the thread probe and the index statistics
// are CompositeExplicitAutograd.
CUSTOM_OP_LIBRARY_IMPL(CUSTOM_OP_NAMESPACE, CompositeExplicitAutograd, m) {
  m.impl("_intra_op_threads_in_batch", TORCH_BOX(&intra_op_threads_kernel));
  m.impl("_index_stats", TORCH_BOX(&index_stats_kernel));
}

PyMODINIT_FUNC PyInit__C() { return create_module(CUSTOM_OP_STRINGIFY(CUSTOM_OP_BUILD_KEY)); }
