// One image's decode in the binding: the options and resize request the
// operators' ints become, and decode_one, which reads the header, checks the
// window, allocates (or takes the caller's slice of) the output and runs the
// torch-free core (csrc/jpeg_decoder.h), exact, resized by ATen's kernel at
// full scale, or resized by the core at a reduced one. It never throws: the
// single calls raise its Status, the batch's threads keep it per image.
// Included only by decode_and_crop_jpeg.cpp, the extension's one
// translation unit, hence the anonymous namespace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "binding/aten_calls.h"
#include "binding/errors.h"
#include "binding/exact_resize.h"
#include "binding/stable_tensors.h"
#include "csrc/jpeg_decoder.h"
#include "csrc/scale_rule.h"

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

}  // namespace
