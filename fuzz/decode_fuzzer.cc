// libFuzzer target for the torch-free core (custom_op/csrc/jpeg_decoder.h).
// Build and run it with `make fuzz` (see fuzz/fuzz.mk).
//
// The whole input is the JPEG file. Its last kParamBytes bytes also choose
// the decode's parameters: libjpeg stops at EOI and never reads what follows,
// so the fuzzer can vary them by appending bytes to a valid file.
//   param[0..3]  the window's y, x, height, width, as fractions of the image
//   param[4]     bit 7 set: max_scans = 1 + the low four bits; bit 7 clear:
//                bit 0 decodes with an MCU index of the file
//                (csrc/index_builder.h: the budget's spacing; bit 2: an
//                entry every 3 MCUs), having checked that the builder's
//                entropy pass and the plain one of fuzz/reference_scan.h
//                agree at every MCU; the index's
//                byte param[0] is damaged when bit 1 is set, and checks the
//                result against the decode without it; bit 6: prepare
//                the file first (csrc/prepare.h), check that the prepared copy
//                decodes to the same pixels, and decode the copy (its windows
//                take the restart-marker seek path); bit 5: seek = false;
//                bit 4: HWC output instead of CHW planes
//   param[5]     bits 0-1: the mode (3 is RGB again), bit 2: strict,
//                bit 3: the whole image, bit 4: decode_resized() instead of
//                decode(), bits 5-6: its DCT scale (1, 2, 4 or 8 eighths),
//                bit 7: antialias; the output size comes from param[0..3];
//                bit 4 clear and bit 5 set: decode_grid_crop() instead of
//                decode(): a rectangle of a grid of 1..min(2 x, 512) times
//                the image's size (param[0] ^ param[2], param[1] ^ param[3]),
//                the rectangle from param[0..3] as fractions of the grid
//                (bit 3: the whole grid), bit 7: antialias
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "grid_crop.h"
#include "jpeg_decoder.h"
#include "prepare.h"
#include "reference_scan.h"

namespace {

// Larger inputs only make each run slower without reaching new code.
constexpr size_t kMaxInputSize = 1 << 20;
// Working memory is bounded by max_memory, left at the default users get
// (256 MiB). Pixels are capped far below the users' 2^28: the output, which
// max_memory does not count, and the time of a whole decode grow with them,
// and the fuzzer finds headers of the largest size allowed. 2^26 pixels (an
// 8192 x 8192 image, where max_memory refuses a progressive 4:4:4 header)
// cut the executions per minute by 8; 2^22 keeps every run fast and inside
// -rss_limit_mb (libjpeg-turbo's own fuzzers cap images at 1048576 pixels).
// core_test and tests/test_hostile.py check max_memory itself.
constexpr int64_t kMaxPixels = int64_t{1} << 22;
constexpr size_t kParamBytes = 6;

// Scales `byte` (0..255) to 0..range-1, or 0 when range <= 0.
int64_t scale(uint8_t byte, int64_t range) { return range > 0 ? byte * range / 256 : 0; }

// A grid size for an image side of `size` pixels: 1..2 x size (up and down
// and, now and then, the same size), at most 512.
int64_t grid_size(uint8_t byte, int64_t size) { return 1 + scale(byte, std::min<int64_t>(2 * size, 512)); }

// The whole image in RGB, or an empty vector when it does not decode.
std::vector<uint8_t> whole_rgb(const uint8_t* data, size_t size, custom_op::DecodeOptions options) {
  options.seek = false;
  custom_op::JpegDecoder decoder(data, size, options);
  custom_op::JpegInfo info;
  if (!decoder.read_header(&info).ok()) {
    return {};
  }
  std::vector<uint8_t> pixels(3 * static_cast<size_t>(info.height) * info.width);
  if (!decoder.decode({0, 0, info.height, info.width}, custom_op::ColorMode::kRgb, pixels.data()).ok()) {
    return {};
  }
  return pixels;
}

// Prepares the file; when that succeeds, a prepared copy that decodes to
// other pixels than the original is a bug: abort, so libFuzzer keeps the input.
std::vector<uint8_t> prepare_and_check(const uint8_t* data, size_t size,
                                       const custom_op::DecodeOptions& options) {
  custom_op::PrepareOptions prepare_options;
  prepare_options.limits = options.limits;
  std::vector<uint8_t> prepared;
  custom_op::PrepareInfo info;
  if (!custom_op::prepare_jpeg(data, size, prepare_options, &prepared, &info).ok()) {
    return {};
  }
  const std::vector<uint8_t> before = whole_rgb(data, size, options);
  const std::vector<uint8_t> after = whole_rgb(prepared.data(), prepared.size(), options);
  if (!before.empty() && before != after) {
    std::abort();
  }
  return prepared;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kParamBytes || size > kMaxInputSize) {
    return 0;
  }
  const uint8_t* param = data + size - kParamBytes;
  custom_op::DecodeOptions options;
  options.strict = (param[5] & 0x04) != 0;
  options.limits.max_pixels = kMaxPixels;
  options.limits.max_memory = custom_op::Limits{}.max_memory;  // The users' default, said explicitly.
  if (param[4] & 0x80) {
    options.limits.max_scans = 1 + (param[4] & 0x0f);
  }
  options.seek = (param[4] & 0x20) == 0;
  std::vector<uint8_t> prepared;
  if (param[4] & 0x40) {
    prepared = prepare_and_check(data, size, options);
    if (prepared.empty()) {
      return 0;
    }
    data = prepared.data();
    size = prepared.size();
  }

  std::vector<uint8_t> index;
  if ((param[4] & 0x81) == 0x01) {
    // The builder's entropy pass must find what the reference finds, entry
    // by entry, refusals included.
    custom_op::mcu_index::ScanLayout scan;
    std::string why;
    if (reference_scan::read_scan_layout(data, size, &scan) &&
        !reference_scan::builder_agrees(data, size, scan, &why)) {
      std::abort();
    }
    custom_op::JpegDecoder indexer(data, size, options);
    custom_op::JpegInfo unused;
    if (indexer.read_header(&unused).ok() &&
        indexer.build_index((param[4] & 0x04) ? 3 : 0, &index)) {
      if (param[4] & 0x02) {
        index[param[0] % index.size()] ^= static_cast<uint8_t>(param[1] | 1);
      }
      options.index = index.data();
      options.index_size = index.size();
    }
  }

  // The header alone, then a decoder destroyed without decode().
  {
    custom_op::JpegDecoder decoder(data, size, options);
    custom_op::JpegInfo info;
    decoder.read_header(&info);
  }

  custom_op::JpegDecoder decoder(data, size, options);
  custom_op::JpegInfo info;
  if (!decoder.read_header(&info).ok()) {
    return 0;
  }
  const auto mode = static_cast<custom_op::ColorMode>((param[5] & 0x03) % 3);
  const bool grid = (param[5] & 0x30) == 0x20;
  custom_op::GridCrop crop;
  if (grid) {
    crop.grid_height = grid_size(param[0] ^ param[2], info.height);
    crop.grid_width = grid_size(param[1] ^ param[3], info.width);
    crop.antialias = (param[5] & 0x80) != 0;
  }
  const int64_t area_height = grid ? crop.grid_height : info.height;
  const int64_t area_width = grid ? crop.grid_width : info.width;
  custom_op::Window window;
  if (param[5] & 0x08) {
    window = {0, 0, area_height, area_width};
  } else {
    // Sizes reach one pixel past the image (or grid), so that check_window
    // and grid_crop_fits also see windows that do not fit.
    window.y = scale(param[0], area_height);
    window.x = scale(param[1], area_width);
    window.height = 1 + scale(param[2], area_height - window.y + 1);
    window.width = 1 + scale(param[3], area_width - window.x + 1);
  }
  crop.rect = window;
  if (!grid && !decoder.check_window(window).ok()) {
    return 0;
  }
  const bool resized = (param[5] & 0x10) != 0;
  const int out_height = resized ? 1 + (param[0] ^ param[2]) % 64 : static_cast<int>(window.height);
  const int out_width = resized ? 1 + (param[1] ^ param[3]) % 64 : static_cast<int>(window.width);
  const size_t out_size = static_cast<size_t>(custom_op::output_channels(info, mode)) *
                          static_cast<size_t>(out_height) * static_cast<size_t>(out_width);
  // Not zeroed, so that MemorySanitizer knows which bytes decode() wrote.
  std::unique_ptr<uint8_t[]> out(new uint8_t[out_size]);
  const custom_op::PixelOrder order =
      (param[4] & 0x10) ? custom_op::PixelOrder::kInterleaved : custom_op::PixelOrder::kPlanar;
  auto run = [&](custom_op::JpegDecoder& d, uint8_t* pixels) {
    if (grid) {
      return custom_op::decode_grid_crop(&d, info, crop, mode, order, pixels);
    }
    if (resized) {
      return d.decode_resized(window, mode, /*scale_num=*/1 << ((param[5] >> 5) & 0x03), out_height,
                              out_width, /*antialias=*/(param[5] & 0x80) != 0, pixels, order);
    }
    return d.decode(window, mode, pixels, order);
  };
  const custom_op::Status status = run(decoder, out.get());
  // A rectangle outside its grid is refused before anything is decoded.
  if (grid && !custom_op::grid_crop_fits(crop) && status.code != custom_op::StatusCode::kInvalidArgument) {
    std::abort();
  }
  if (!status.ok()) {
    return 0;
  }
  if (options.index != nullptr) {
    // With an index or without, damaged or not, the pixels are the same.
    custom_op::DecodeOptions plain = options;
    plain.index = nullptr;
    plain.index_size = 0;
    custom_op::JpegDecoder reference(data, size, plain);
    custom_op::JpegInfo unused;
    std::unique_ptr<uint8_t[]> expected(new uint8_t[out_size]);
    if (reference.read_header(&unused).ok() && run(reference, expected.get()).ok() &&
        std::memcmp(expected.get(), out.get(), out_size) != 0) {
      std::abort();
    }
  }
  // Touch all of the output in order to catch bytes that decode() left
  // unwritten when using MemorySanitizer (and overflows with ASan).
  unsigned int sum = 0;
  for (size_t i = 0; i < out_size; ++i) {
    sum += out[i];
  }
  volatile unsigned int sink = sum;
  (void)sink;
  return 0;
}
