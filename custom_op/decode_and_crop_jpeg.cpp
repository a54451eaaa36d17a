// The pybind11 binding of custom_op: validates what Python hands over, reads
// the header, allocates the output tensor, runs the torch-free core
// (csrc/jpeg_decoder.h) with the GIL released, and turns a failed Status into
// a Python exception. Argument parsing with friendly messages happens first in
// custom_op/_decode.py; the checks here keep direct calls of _C safe.
//
// Only the few torch headers needed are included: torch/extension.h doubles
// the compile time that every training job pays on a cold cache.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/utils/pybind.h>

#include <exception>
#include <string>

#include "csrc/jpeg_decoder.h"

namespace py = pybind11;

namespace {

// Thrown for bad data; translated into custom_op.JpegDecodeError.
class JpegDecodeError : public std::exception {
 public:
  explicit JpegDecodeError(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// The encoded bytes, borrowed from a tensor or a buffer that outlives the call.
struct ByteSpan {
  const uint8_t* data;
  size_t size;
};

ByteSpan span_of_tensor(const at::Tensor& data) {
  if (data.scalar_type() != at::kByte) {
    throw py::type_error("data must be a uint8 tensor, got " + std::string(c10::toString(data.scalar_type())));
  }
  if (data.dim() != 1 || !data.device().is_cpu() || !data.is_contiguous()) {
    throw py::value_error("data must be a 1-D contiguous CPU tensor");
  }
  return ByteSpan{data.data_ptr<uint8_t>(), static_cast<size_t>(data.numel())};
}

ByteSpan span_of_buffer(const py::buffer_info& info) {
  if (info.itemsize != 1 || info.ndim != 1 || (info.size > 1 && info.strides[0] != 1)) {
    throw py::value_error("data must be a 1-D contiguous buffer of bytes");
  }
  return ByteSpan{static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size)};
}

[[noreturn]] void raise_status(const char* function, const custom_op::Status& status) {
  const std::string message = std::string(function) + "(): " + status.message;
  if (status.code == custom_op::StatusCode::kInvalidArgument) {
    throw py::value_error(message);
  }
  throw JpegDecodeError(message);
}

custom_op::DecodeOptions make_options(bool strict, int64_t max_pixels, int64_t max_scans,
                                     bool exact_edges) {
  if (max_pixels < 1 || max_scans < 1) {
    throw py::value_error("max_pixels and max_scans must be positive");
  }
  custom_op::DecodeOptions options;
  options.strict = strict;
  options.limits.max_pixels = max_pixels;
  options.limits.max_scans = max_scans;
  options.exact_edges = exact_edges;
  return options;
}

custom_op::ColorMode to_mode(int64_t mode) {
  if (mode < 0 || mode > 2) {
    throw py::value_error("mode must be 0 (rgb), 1 (gray) or 2 (unchanged), got " + std::to_string(mode));
  }
  return static_cast<custom_op::ColorMode>(mode);
}

py::tuple jpeg_size(ByteSpan bytes) {
  custom_op::JpegDecoder decoder(bytes.data, bytes.size, custom_op::DecodeOptions{});
  custom_op::JpegInfo info;
  custom_op::Status status = decoder.read_header(&info);
  if (!status.ok()) {
    raise_status("jpeg_size", status);
  }
  return py::make_tuple(info.height, info.width, info.channels);
}

at::Tensor decode_and_crop(ByteSpan bytes, int64_t crop_y, int64_t crop_x, int64_t crop_height,
                           int64_t crop_width, int64_t mode, bool strict, int64_t max_pixels,
                           int64_t max_scans, bool exact_edges) {
  const char* name = "decode_and_crop_jpeg";
  const custom_op::ColorMode color_mode = to_mode(mode);
  custom_op::JpegDecoder decoder(bytes.data, bytes.size, make_options(strict, max_pixels, max_scans, exact_edges));
  custom_op::JpegInfo info;
  custom_op::Status status = decoder.read_header(&info);
  if (!status.ok()) {
    raise_status(name, status);
  }
  const custom_op::Window window{crop_y, crop_x, crop_height, crop_width};
  status = decoder.check_window(window);
  if (!status.ok()) {
    raise_status(name, status);
  }
  const int64_t channels = custom_op::output_channels(info, color_mode);
  at::Tensor out = at::empty({channels, crop_height, crop_width}, at::kByte);
  {
    py::gil_scoped_release no_gil;
    status = decoder.decode(window, color_mode, out.data_ptr<uint8_t>());
  }
  if (!status.ok()) {
    raise_status(name, status);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "custom_op's native core; use the functions of the custom_op package instead.";
  // Bad data raises the Python class defined in custom_op/_errors.py, so that
  // it pickles by a stable name across DataLoader worker processes.
  static py::object error_class = py::module_::import("custom_op._errors").attr("JpegDecodeError");
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) {
        std::rethrow_exception(thrown);
      }
    } catch (const JpegDecodeError& e) {
      PyErr_SetString(error_class.ptr(), e.what());
    }
  });

  m.def("libjpeg_version", &custom_op::libjpeg_turbo_version);
  m.attr("build_key") = CUSTOM_OP_STRINGIFY(CUSTOM_OP_BUILD_KEY);

  m.def("jpeg_size", [](const at::Tensor& data) { return jpeg_size(span_of_tensor(data)); });
  m.def("jpeg_size", [](const py::buffer& data) {
    const py::buffer_info info = data.request();
    return jpeg_size(span_of_buffer(info));
  });

  // exact_edges=False exists only for the tests that show why it is the default.
  m.def(
      "decode_and_crop_jpeg",
      [](const at::Tensor& data, int64_t y, int64_t x, int64_t h, int64_t w, int64_t mode, bool strict,
         int64_t max_pixels, int64_t max_scans, bool exact_edges) {
        return decode_and_crop(span_of_tensor(data), y, x, h, w, mode, strict, max_pixels, max_scans,
                               exact_edges);
      },
      py::arg("data"), py::arg("crop_y"), py::arg("crop_x"), py::arg("crop_height"),
      py::arg("crop_width"), py::arg("mode"), py::arg("strict"), py::arg("max_pixels"),
      py::arg("max_scans"), py::arg("exact_edges") = true);
  m.def(
      "decode_and_crop_jpeg",
      [](const py::buffer& data, int64_t y, int64_t x, int64_t h, int64_t w, int64_t mode, bool strict,
         int64_t max_pixels, int64_t max_scans, bool exact_edges) {
        const py::buffer_info info = data.request();
        return decode_and_crop(span_of_buffer(info), y, x, h, w, mode, strict, max_pixels, max_scans,
                               exact_edges);
      },
      py::arg("data"), py::arg("crop_y"), py::arg("crop_x"), py::arg("crop_height"),
      py::arg("crop_width"), py::arg("mode"), py::arg("strict"), py::arg("max_pixels"),
      py::arg("max_scans"), py::arg("exact_edges") = true);
}
