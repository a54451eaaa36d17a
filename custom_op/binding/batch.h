// The batch in the binding: every image's window decoded (resized,
// mirrored) on the batch's threads, each into its slice of a stacked output
// when there is one, and each image's outcome kept apart, as DALI's decoder
// returns one result per sample: one bad file costs that file, not the
// batch. The outcomes leave as two uint8 tensors (an operator returns
// tensors, not strings), which custom_op/_core/_native.py reads back:
// `codes`, one StatusCode per image, and `messages`, one text per image, each
// ended by a NUL byte: empty for an image that decoded, else its Status's
// message tagged with its Python type (binding/errors.h). The Python layer
// names the function and the image, which only it knows when it decodes a
// part of the caller's batch here.
// Included only by decode_and_crop_jpeg.cpp, the extension's one
// translation unit, hence the anonymous namespace.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "binding/errors.h"
#include "binding/index_kernels.h"
#include "binding/stable_tensors.h"
#include "binding/thread_pool.h"
#include "binding/window_decode.h"
#include "csrc/mirror.h"

namespace {

// What a batch is asked for, as the two batch operators receive it.
struct BatchRequest {
  std::vector<Tensor> datas;
  std::vector<int64_t> boxes;
  std::vector<int64_t> scale_nums;
  int64_t out_height;
  int64_t out_width;
  int64_t mode;
  bool antialias;
  custom_op::DecodeOptions options;
  int64_t num_threads;
  bool contiguous;
  std::vector<int64_t> hflips;
  // Empty, or one MCU-row index per image (custom_op.jpeg_index's bytes), an
  // empty tensor for an image without one: a list of tensors crosses the
  // stable ABI on every supported torch, a list of optional ones is newer.
  std::vector<Tensor> indexes;
};

// The decoded [C, H, W] `image` mirrored left to right in place (a new
// output, or a slice of the batch's, in `order`'s layout either way).
void mirror_output(const Tensor& image, custom_op::PixelOrder order) {
  custom_op::mirror_left_right(bytes_of(image), image.size(0), image.size(1), image.size(2), order);
}

// Every byte of `tensor`, a new output or a slice of the stacked one, set to
// zero. Both are contiguous memory in either layout (CHW planes, or HWC
// pixels seen as CHW), so that is numel() bytes from its first one.
void zero_bytes(const Tensor& tensor) {
  std::memset(bytes_of(tensor), 0, static_cast<size_t>(tensor.numel()));
}

// What stands in for an image that failed, when there is no stacked output:
// zeros of the shape it would have had (the fake kernel's), so that a graph
// that traced the batch gets the tensors it planned for. A window that is
// larger than max_pixels (or not a window at all) would never have been
// decoded, and is not allocated either: that image gets [C, 0, 0].
Tensor placeholder(const BatchRequest& request, const custom_op::Window& window,
                   custom_op::PixelOrder order) {
  const int64_t channels = request.mode == static_cast<int64_t>(custom_op::ColorMode::kGray) ? 1 : 3;
  int64_t height = request.out_height, width = request.out_width;
  if (height < 1) {
    const bool plausible = window.height >= 1 && window.width >= 1 &&
                           window.height <= request.options.limits.max_pixels / window.width;
    height = plausible ? window.height : 0;
    width = plausible ? window.width : 0;
  }
  Tensor image = new_output(channels, height, width, order);
  zero_bytes(image);
  return image;
}

// The per-image Statuses as the operators return them (see the top of this file).
std::pair<Tensor, Tensor> outcome_tensors(const std::vector<custom_op::Status>& statuses) {
  std::string text;
  for (size_t i = 0; i < statuses.size(); ++i) {
    if (!statuses[i].ok()) {
      text += tagged_status(statuses[i], statuses[i].message);
    }
    text.push_back('\0');
  }
  Tensor codes = empty_bytes({static_cast<int64_t>(statuses.size())});
  for (size_t i = 0; i < statuses.size(); ++i) {
    bytes_of(codes)[i] = static_cast<uint8_t>(statuses[i].code);
  }
  Tensor messages = empty_bytes({static_cast<int64_t>(text.size())});
  std::copy(text.begin(), text.end(), bytes_of(messages));
  return {codes, messages};
}

// Decodes the batch: each image into its slice of `out` when given (the
// caller's stacked N x C x H x W tensor), else into `outputs` (new tensors,
// or a placeholder for an image that failed). Scale numerators may be
// kScaleAuto. `hflips` is empty, or one 0/1 per image: 1 mirrors that image
// left to right after its decode, on the thread that decoded it. An image's
// index is used as the single calls use theirs (refused by its checksum when
// it is not this file's: the ordinary decode, the same pixels). Throws only
// for arguments that no image could be decoded with; a failing image is
// kept in its Status, and its slice of `out` is zeroed.
std::vector<custom_op::Status> run_batch(const BatchRequest& request, const std::optional<Tensor>& out,
                                         std::vector<Tensor>* outputs) {
  const size_t count = request.datas.size();
  const bool resize = request.out_height > 0;
  if (request.boxes.size() != 4 * count || (resize && request.scale_nums.size() != count) ||
      (!request.hflips.empty() && request.hflips.size() != count) ||
      (!request.indexes.empty() && request.indexes.size() != count)) {
    throw_value_error("boxes must hold 4 numbers per image, hflips one per image or none "
                      "(this is a bug in custom_op)");
  }
  std::vector<custom_op::Window> windows;
  std::vector<ResizeRequest> resizes;
  std::vector<ByteSpan> inputs;
  std::vector<custom_op::DecodeOptions> options(count, request.options);
  const std::vector<int64_t>& boxes = request.boxes;
  for (size_t i = 0; i < count; ++i) {
    windows.push_back({boxes[4 * i], boxes[4 * i + 1], boxes[4 * i + 2], boxes[4 * i + 3]});
    if (resize) {
      resizes.push_back(make_resize(windows[i], request.out_height, request.out_width,
                                    request.scale_nums[i], request.antialias));
    }
    inputs.push_back(span_of_tensor(request.datas[i]));
    if (!request.indexes.empty() && request.indexes[i].numel() > 0) {
      options[i] = with_index(request.options, request.indexes[i]);
    }
  }
  const custom_op::ColorMode color_mode = to_mode(request.mode);
  const custom_op::PixelOrder order = pixel_order(request.contiguous);
  const std::vector<std::optional<Tensor>> slices =
      slices_of(out, count, request.out_height, request.out_width, order);
  outputs->assign(count, Tensor());
  std::vector<custom_op::Status> statuses(count);
  run_in_parallel(count, request.num_threads, [&](size_t i) {
    try {
      statuses[i] = decode_one(inputs[i], options[i], color_mode, order, windows[i],
                               resize ? &resizes[i] : nullptr, slices[i], &(*outputs)[i]);
      if (statuses[i].ok() && !request.hflips.empty() && request.hflips[i] != 0) {
        mirror_output((*outputs)[i], order);
      }
    } catch (...) {  // Never unwind into a batch thread.
      statuses[i] = status_of_current_exception();
    }
  });
  for (size_t i = 0; i < count; ++i) {
    if (statuses[i].ok()) {
      continue;
    }
    if (slices[i].has_value()) {
      zero_bytes(*slices[i]);
    } else {
      (*outputs)[i] = placeholder(request, windows[i], order);
    }
  }
  return statuses;
}

}  // namespace
