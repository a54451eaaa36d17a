// The binding of custom_op: validates what Python hands over, reads the
// header, allocates the output tensor, runs the torch-free core
// (csrc/jpeg_decoder.h) with the GIL released, and turns a failed Status into
// a Python exception. Argument parsing with friendly messages happens first in
// custom_op/_decode.py; the checks here keep direct calls safe. The binding's
// own parts live in binding/: the borrowed input bytes, the mapping of
// failures to Python exceptions, the batch's threads.
//
// Two front doors share the same code: the single-image decodes of a tensor
// are PyTorch operators (TORCH_LIBRARY, torch.ops.custom_op.*), so that
// torch.compile traces them, with fake kernels in custom_op/_ops.py; pybind11
// serves what an operator schema cannot take (buffers such as bytes, the
// batch's sequence of mixed inputs, prepare's bytes result).
//
// Only the few torch headers needed are included: torch/extension.h doubles
// the compile time that every training job pays on a cold cache.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_upsample_bilinear2d_aa.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/upsample_bilinear2d.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "binding/encoded_bytes.h"
#include "binding/loaded_libjpeg.h"
#include "binding/python_errors.h"
#include "binding/thread_pool.h"
#include "csrc/jpeg_decoder.h"
#include "csrc/prepare.h"

namespace py = pybind11;

namespace {

custom_op::DecodeOptions make_options(bool strict, int64_t max_pixels, int64_t max_scans,
                                     int64_t max_memory, bool exact_edges, bool seek) {
  if (max_pixels < 1 || max_scans < 1 || max_memory < 1) {
    throw py::value_error("max_pixels, max_scans and max_memory must be positive");
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
    throw py::value_error("mode must be 0 (rgb), 1 (gray) or 2 (unchanged), got " + std::to_string(mode));
  }
  return static_cast<custom_op::ColorMode>(mode);
}

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

py::tuple jpeg_size(ByteSpan bytes) {
  custom_op::JpegDecoder decoder(bytes.data, bytes.size, header_only_options());
  const custom_op::JpegInfo info = read_header_or_raise("jpeg_size", &decoder);
  return py::make_tuple(info.height, info.width, info.channels);
}

// The restart-segment grid decode_and_crop_jpeg seeks with, as
// (interval, mcus_per_row, mcu_rows, mcu_height, mcu_width), or None.
py::object restart_geometry(ByteSpan bytes) {
  custom_op::JpegDecoder decoder(bytes.data, bytes.size, header_only_options());
  read_header_or_raise("seekable", &decoder);
  custom_op::restarts::ScanGeometry g;
  if (!decoder.restart_geometry(&g)) {
    return py::none();
  }
  return py::make_tuple(g.interval, g.mcus_per_row, g.mcu_rows, g.mcu_height, g.mcu_width);
}

// The lossless rewrite of csrc/prepare.h, as (bytes, restart_interval,
// was_progressive), with the GIL released while it runs.
py::tuple prepare_jpeg(ByteSpan bytes, int64_t max_pixels, int64_t max_scans, int64_t segment_width,
                       int64_t max_memory) {
  if (segment_width < 1) {
    throw py::value_error("segment_width must be positive, got " + std::to_string(segment_width));
  }
  custom_op::PrepareOptions options;
  options.limits = make_options(true, max_pixels, max_scans, max_memory, true, true).limits;
  options.segment_width = segment_width;
  std::vector<uint8_t> out;
  custom_op::PrepareInfo info;
  custom_op::Status status;
  {
    py::gil_scoped_release no_gil;
    try {
      status = custom_op::prepare_jpeg(bytes.data, bytes.size, options, &out, &info);
    } catch (...) {
      status = status_of_current_exception();
    }
  }
  if (!status.ok()) {
    raise_status("prepare_jpeg", status);
  }
  return py::make_tuple(py::bytes(reinterpret_cast<const char*>(out.data()), out.size()),
                        info.restart_interval, info.was_progressive);
}

// What a resized decode needs besides the bytes and the window.
struct ResizeRequest {
  int64_t out_height;
  int64_t out_width;
  int scale_num;
  bool antialias;
};

// Checks the int64 values from Python before any of them is narrowed.
ResizeRequest make_resize(int64_t out_height, int64_t out_width, int64_t scale_num, bool antialias) {
  if (scale_num < 1 || scale_num > 8 || out_height < 1 || out_width < 1 || out_height > 65535 ||
      out_width > 65535) {
    throw py::value_error("scale_num must be 1..8 and the output size 1..65535, got scale_num=" +
                          std::to_string(scale_num) + " and " + std::to_string(out_height) + " x " +
                          std::to_string(out_width));
  }
  return ResizeRequest{out_height, out_width, static_cast<int>(scale_num), antialias};
}

// A new [channels, height, width] tensor: contiguous CHW for
// PixelOrder::kPlanar, else a view of contiguous HWC memory, which is what
// torchvision's decode_jpeg returns and what libjpeg writes.
at::Tensor new_output(int64_t channels, int64_t height, int64_t width, custom_op::PixelOrder order) {
  if (order == custom_op::PixelOrder::kPlanar) {
    return empty_bytes({channels, height, width});
  }
  return empty_bytes({height, width, channels}).permute({2, 0, 1});
}

// The tensor a decode writes its [channels, height, width] result to: `into`
// when the caller preallocated it (a slice of the batch's stacked output, in
// `order`, so that no stacking copy follows), else a new one.
at::Tensor output_tensor(const at::Tensor& into, int64_t channels, int64_t height, int64_t width,
                         custom_op::PixelOrder order) {
  return into.defined() ? into : new_output(channels, height, width, order);
}

// Resizes the [1, C, H, W] `input` into `output` (of the requested size)
// with the very ATen kernel that torchvision's resize(antialias=...) runs on
// uint8 CPU tensors.
void resize_with_aten(const at::Tensor& input, const ResizeRequest& resize, at::Tensor output) {
  const std::vector<int64_t> size{resize.out_height, resize.out_width};
  if (resize.antialias) {
    at::_upsample_bilinear2d_aa_out(output, input, size, /*align_corners=*/false);
  } else {
    at::upsample_bilinear2d_out(output, input, size, /*align_corners=*/false);
  }
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
                              custom_op::PixelOrder order, const at::Tensor& target) {
  const custom_op::Status within_limits = decoder->reserve_memory(
      4 * (window.height * window.width + resize.out_height * resize.out_width));
  if (!within_limits.ok()) {
    return within_limits;
  }
  const at::Tensor rows = empty_bytes({1, window.height, window.width, 4});
  custom_op::Status status = decoder->decode_rgbx(window, mode, rows.data_ptr<uint8_t>());
  if (!status.ok()) {
    return status;
  }
  const at::Tensor resized = empty_bytes({1, resize.out_height, resize.out_width, 4});
  resize_with_aten(rows.permute({0, 3, 1, 2}), resize, resized.permute({0, 3, 1, 2}));
  const uint8_t* pixels = resized.data_ptr<uint8_t>();
  uint8_t* out = target.data_ptr<uint8_t>();
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
                                     const at::Tensor& into, at::Tensor* out) {
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
  at::Tensor crop = identity ? output_tensor(into, channels, window.height, window.width, order)
                             : new_output(channels, window.height, window.width, order);
  custom_op::Status status = decoder->decode(window, mode, crop.data_ptr<uint8_t>(), order);
  if (!status.ok() || identity) {
    *out = crop;
    return status;
  }
  *out = output_tensor(into, channels, resize.out_height, resize.out_width, order);
  resize_with_aten(crop.unsqueeze(0), resize, out->unsqueeze(0));
  return status;
}

// Header, window check, allocation and decode of one image: the exact crop,
// or with `resize` the resized one, written to `into` if it is defined (the
// caller checked its shape). Never throws, and needs no GIL, so the single
// calls and the batch's threads all run it.
custom_op::Status decode_one(ByteSpan bytes, const custom_op::DecodeOptions& options,
                             custom_op::ColorMode mode, custom_op::PixelOrder order,
                             const custom_op::Window& window, const ResizeRequest* resize,
                             const at::Tensor& into, at::Tensor* out) {
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
      return decoder.decode(window, mode, out->data_ptr<uint8_t>(), order);
    }
    if (into.defined() && into.size(0) != channels) {
      return custom_op::Status{custom_op::StatusCode::kInvalidArgument,
                               "the stacked output has the wrong channel count (this is a bug in custom_op)"};
    }
    if (resize->scale_num == 8) {
      return decode_then_resize(&decoder, window, mode, channels, *resize, order, into, out);
    }
    *out = output_tensor(into, channels, resize->out_height, resize->out_width, order);
    return decoder.decode_resized(window, mode, resize->scale_num,
                                  static_cast<int>(resize->out_height),
                                  static_cast<int>(resize->out_width), resize->antialias,
                                  out->data_ptr<uint8_t>(), order);
  } catch (...) {  // Report, never unwind into a batch thread or through the GIL release.
    return status_of_current_exception();
  }
}

custom_op::PixelOrder pixel_order(bool contiguous) {
  return contiguous ? custom_op::PixelOrder::kPlanar : custom_op::PixelOrder::kInterleaved;
}

// One image, with the GIL released while it decodes.
at::Tensor decode_single(const char* function, ByteSpan bytes, const custom_op::Window& window,
                         int64_t mode, const custom_op::DecodeOptions& options,
                         const ResizeRequest* resize, bool contiguous) {
  const custom_op::ColorMode color_mode = to_mode(mode);
  at::Tensor out;
  custom_op::Status status;
  {
    const GilReleased no_gil;
    status = decode_one(bytes, options, color_mode, pixel_order(contiguous), window, resize,
                        /*into=*/at::Tensor(), &out);
  }
  if (!status.ok()) {
    raise_status(function, status);
  }
  return out;
}

// The per-image [C, H, W] views of the batch's preallocated N x C x H x W
// output (contiguous, or channels_last for interleaved pixels), or undefined
// tensors when there is none.
std::vector<at::Tensor> slices_of(const std::optional<at::Tensor>& stacked, size_t count,
                                  int64_t out_height, int64_t out_width, custom_op::PixelOrder order) {
  std::vector<at::Tensor> slices(count);
  if (!stacked.has_value()) {
    return slices;
  }
  const at::Tensor& out = *stacked;
  const at::MemoryFormat format = order == custom_op::PixelOrder::kPlanar
                                       ? at::MemoryFormat::Contiguous
                                       : at::MemoryFormat::ChannelsLast;
  const bool fits = out.scalar_type() == at::kByte && out.device().is_cpu() && out.is_contiguous(format) &&
                    out.dim() == 4 && out.size(0) == static_cast<int64_t>(count) &&
                    out.size(2) == out_height && out.size(3) == out_width;
  if (!fits || out_height < 1) {
    throw py::value_error("out must be a uint8 N x C x size tensor in the requested memory format (this is a bug in custom_op)");
  }
  for (size_t i = 0; i < count; ++i) {
    slices[i] = out.select(0, static_cast<int64_t>(i));
  }
  return slices;
}

// With `out` (and a size), every result is written into its slice of `out`:
// a stacked batch needs no copy after the decode.
std::vector<at::Tensor> decode_batch(const py::sequence& datas, const std::vector<int64_t>& boxes,
                                     const std::vector<int64_t>& scale_nums, int64_t out_height,
                                     int64_t out_width, int64_t mode, bool antialias,
                                     bool strict, int64_t max_pixels, int64_t max_scans,
                                     int64_t num_threads, bool seek,
                                     const std::optional<at::Tensor>& out, bool contiguous,
                                     int64_t max_memory) {
  const size_t count = datas.size();
  const bool resize = out_height > 0;
  if (boxes.size() != 4 * count || (resize && scale_nums.size() != count)) {
    throw py::value_error("boxes must hold 4 numbers per image (this is a bug in custom_op)");
  }
  std::vector<ResizeRequest> requests;
  for (size_t i = 0; resize && i < count; ++i) {
    requests.push_back(make_resize(out_height, out_width, scale_nums[i], antialias));
  }
  const custom_op::ColorMode color_mode = to_mode(mode);
  const custom_op::DecodeOptions options =
      make_options(strict, max_pixels, max_scans, max_memory, true, seek);
  const std::vector<BorrowedBytes> inputs = borrow_all(datas);
  const custom_op::PixelOrder order = pixel_order(contiguous);
  const std::vector<at::Tensor> slices = slices_of(out, count, out_height, out_width, order);
  std::vector<at::Tensor> outputs(count);
  std::vector<custom_op::Status> statuses(count);
  {
    py::gil_scoped_release no_gil;
    run_in_parallel(count, num_threads, [&](size_t i) {
      const custom_op::Window window{boxes[4 * i], boxes[4 * i + 1], boxes[4 * i + 2], boxes[4 * i + 3]};
      statuses[i] = decode_one(inputs[i].span(), options, color_mode, order, window,
                               resize ? &requests[i] : nullptr, slices[i], &outputs[i]);
    });
  }
  for (size_t i = 0; i < count; ++i) {
    if (!statuses[i].ok()) {
      raise_status("decode_and_crop_jpeg_batch", statuses[i], "image " + std::to_string(i) + ": ");
    }
  }
  return outputs;
}

// The entry points that take the encoded bytes, for one kind of input: a
// tensor or any object with the buffer protocol (bytes, numpy, ...).
template <typename Data>
void def_single_image_functions(py::module_& m) {
  m.def("jpeg_size", [](const Data& data) {
    const BorrowedBytes bytes(data);
    return jpeg_size(bytes.span());
  });
  // exact_edges=False exists only for the tests that show why it is the default.
  m.def(
      "decode_and_crop_jpeg",
      [](const Data& data, int64_t y, int64_t x, int64_t h, int64_t w, int64_t mode, bool strict,
         int64_t max_pixels, int64_t max_scans, bool seek, bool exact_edges, bool contiguous,
         int64_t max_memory) {
        const BorrowedBytes bytes(data);
        return decode_single("decode_and_crop_jpeg", bytes.span(), {y, x, h, w}, mode,
                             make_options(strict, max_pixels, max_scans, max_memory, exact_edges, seek),
                             /*resize=*/nullptr, contiguous);
      },
      py::arg("data"), py::arg("crop_y"), py::arg("crop_x"), py::arg("crop_height"),
      py::arg("crop_width"), py::arg("mode"), py::arg("strict"), py::arg("max_pixels"),
      py::arg("max_scans"), py::arg("seek") = true, py::arg("exact_edges") = true,
      py::arg("contiguous") = false, py::arg("max_memory") = custom_op::Limits{}.max_memory);
  m.def("decode_and_resized_crop_jpeg",
        [](const Data& data, int64_t y, int64_t x, int64_t h, int64_t w, int64_t out_height,
           int64_t out_width, int64_t scale_num, bool antialias, int64_t mode, bool strict,
           int64_t max_pixels, int64_t max_scans, bool seek, bool contiguous, int64_t max_memory) {
          const BorrowedBytes bytes(data);
          const ResizeRequest request = make_resize(out_height, out_width, scale_num, antialias);
          return decode_single("decode_and_resized_crop_jpeg", bytes.span(), {y, x, h, w}, mode,
                               make_options(strict, max_pixels, max_scans, max_memory, true, seek),
                               &request, contiguous);
        },
        py::arg("data"), py::arg("crop_y"), py::arg("crop_x"), py::arg("crop_height"),
        py::arg("crop_width"), py::arg("out_height"), py::arg("out_width"), py::arg("scale_num"),
        py::arg("antialias"), py::arg("mode"), py::arg("strict"), py::arg("max_pixels"),
        py::arg("max_scans"), py::arg("seek") = true, py::arg("contiguous") = false,
        py::arg("max_memory") = custom_op::Limits{}.max_memory);
  m.def("restart_geometry", [](const Data& data) {
    const BorrowedBytes bytes(data);
    return restart_geometry(bytes.span());
  });
  m.def("prepare_jpeg",
        [](const Data& data, int64_t max_pixels, int64_t max_scans, int64_t segment_width,
           int64_t max_memory) {
          const BorrowedBytes bytes(data);
          return prepare_jpeg(bytes.span(), max_pixels, max_scans, segment_width, max_memory);
        },
        py::arg("data"), py::arg("max_pixels"), py::arg("max_scans"), py::arg("segment_width"),
        py::arg("max_memory") = custom_op::Limits{}.max_memory);
}

// The registered operators' kernels: the same decodes as the pybind11
// functions of a tensor, in the order of the schemas in TORCH_LIBRARY below.
// BorrowedBytes checks the data tensor and holds its storage.
at::Tensor crop_operator(const at::Tensor& data, int64_t y, int64_t x, int64_t h, int64_t w,
                         int64_t mode, bool strict, int64_t max_pixels, int64_t max_scans,
                         bool seek, bool contiguous, int64_t max_memory) {
  const BorrowedBytes bytes(data);
  return decode_single("decode_and_crop_jpeg", bytes.span(), {y, x, h, w}, mode,
                       make_options(strict, max_pixels, max_scans, max_memory, true, seek),
                       /*resize=*/nullptr, contiguous);
}

at::Tensor resized_crop_operator(const at::Tensor& data, int64_t y, int64_t x, int64_t h,
                                 int64_t w, int64_t out_height, int64_t out_width,
                                 int64_t scale_num, bool antialias, int64_t mode, bool strict,
                                 int64_t max_pixels, int64_t max_scans, bool seek,
                                 bool contiguous, int64_t max_memory) {
  const BorrowedBytes bytes(data);
  const ResizeRequest request = make_resize(out_height, out_width, scale_num, antialias);
  return decode_single("decode_and_resized_crop_jpeg", bytes.span(), {y, x, h, w}, mode,
                       make_options(strict, max_pixels, max_scans, max_memory, true, seek),
                       &request, contiguous);
}

}  // namespace

// The window and output sizes are SymInts, so that torch.compile keeps them
// symbolic (one graph for every random window) instead of recompiling per
// value; the kernels see them as plain ints. `mode`, the flags and limits
// are ints and bools, constant per call site.
TORCH_LIBRARY(custom_op, m) {
  // The fake kernels, which give torch.compile the output's shape and strides
  // without decoding, are registered from Python by this module.
  m.set_python_module("custom_op._ops");
  m.def(
      "decode_and_crop_jpeg(Tensor data, SymInt crop_y, SymInt crop_x, SymInt crop_height, "
      "SymInt crop_width, int mode, bool strict, int max_pixels, int max_scans, bool seek, "
      "bool contiguous, int max_memory) -> Tensor");
  m.def(
      "decode_and_resized_crop_jpeg(Tensor data, SymInt crop_y, SymInt crop_x, "
      "SymInt crop_height, SymInt crop_width, SymInt out_height, SymInt out_width, "
      "int scale_num, bool antialias, int mode, bool strict, int max_pixels, int max_scans, "
      "bool seek, bool contiguous, int max_memory) -> Tensor");
}

TORCH_LIBRARY_IMPL(custom_op, CPU, m) {
  m.impl("decode_and_crop_jpeg", &crop_operator);
  m.impl("decode_and_resized_crop_jpeg", &resized_crop_operator);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "custom_op's native core; use the functions of the custom_op package instead.";
  // Bad data raises the Python class defined in custom_op/_errors.py, so that
  // it pickles by a stable name across DataLoader worker processes.
  jpeg_decode_error_class =
      py::object(py::module_::import("custom_op._errors").attr("JpegDecodeError")).release().ptr();

  // The library loaded, when its file tells; else the headers' version.
  m.def("libjpeg_version", [] {
    const std::string& loaded = custom_op::binding::loaded_libjpeg_version();
    return loaded.empty() ? std::string(custom_op::libjpeg_turbo_version()) : loaded;
  });
  m.def("libjpeg_crop_width_fault", &custom_op::libjpeg_crop_width_fault);
  m.attr("build_key") = CUSTOM_OP_STRINGIFY(CUSTOM_OP_BUILD_KEY);

  // Tensors first: pybind11 tries overloads in order, and a tensor does not
  // offer the buffer protocol.
  def_single_image_functions<at::Tensor>(m);
  def_single_image_functions<py::buffer>(m);
  m.def("decode_batch", &decode_batch, py::arg("datas"), py::arg("boxes"), py::arg("scale_nums"),
        py::arg("out_height"), py::arg("out_width"), py::arg("mode"), py::arg("antialias"),
        py::arg("strict"), py::arg("max_pixels"), py::arg("max_scans"), py::arg("num_threads"),
        py::arg("seek") = true, py::arg("out") = py::none(), py::arg("contiguous") = false,
        py::arg("max_memory") = custom_op::Limits{}.max_memory);
  m.attr("DEFAULT_MAX_MEMORY") = custom_op::Limits{}.max_memory;
  m.def("_intra_op_threads_in_batch", &intra_op_threads_in_batch, py::arg("num_threads"));
}
