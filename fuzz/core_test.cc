// A plain C++ test driver for the torch-free core (custom_op/csrc/jpeg_decoder.h),
// built with ASan and UBSan by `make sanitize` (see fuzz/fuzz.mk).
//
// Usage: core_test PATH...   (folders, whose files are all read, or files)
//
// Every file, and a few altered copies of it (truncated, one bit flipped, a
// progressive file ended after half its scans), is decoded in every mode,
// strict and not, whole and through a dozen windows. So is its prepared copy
// (csrc/prepare.h), through which the windows take the restart-marker seek
// path, and copies of that with damaged markers.
// The invariants:
//   - a failure is a Status (kDecodeError with libjpeg's text), never a crash,
//     and a bad window or a second decode() is kInvalidArgument;
//   - a whole decode writes every output byte and is deterministic;
//   - when the whole decode succeeds, every window succeeds too and equals
//     the same window of the whole decode, bit for bit;
//   - max_pixels, max_scans and max_memory fail with their names in the
//     message, max_memory before decoding anything, and windows whose sums
//     overflow int64 are refused without undefined behaviour;
//   - a prepared copy decodes to exactly the pixels of its original, and
//     seeking (on by default) gives the same windows as seek=false;
//   - HWC (interleaved) output holds the same pixels as CHW planes;
//   - the resized path, at every DCT scale, is deterministic and equals the
//     window of a decode of every column at that scale (check_resized);
//   - windows 1 to 3 pixels a side, as turned files ask for them, decode and
//     resize deterministically in every mode, HWC equal to CHW
//     (check_narrow_windows);
//   - a grid crop (csrc/grid_crop.h) of a rectangle equals the same rectangle
//     of the grid crop of the whole grid, bit for bit, for grids smaller,
//     larger and one row high, with and without antialias, in CHW and HWC
//     (check_grid);
//   - the SSE2 and AVX2 versions of the resize passes (csrc/fixed_point_passes.h)
//     give the portable version's bytes, for every pixel size, shrinking and
//     enlarging, with odd row counts and widths (check_kernels, once; the
//     levels this CPU lacks are skipped and said so);
//   - decoding with an MCU-row index gives the pixels of decoding without,
//     and a damaged, stale or foreign index is refused (check_index,
//     fuzz/index_checks.h);
//   - the index builder's entropy pass and a plain reference of it
//     (fuzz/reference_scan.h) agree at every MCU, for every file, damaged
//     copies of its entropy-coded data and random streams
//     (check_scan_reader, check_random_scans: fuzz/scan_checks.h).
// The last line is "N passed, N failed"; the exit status is 1 on any failure.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "grid_crop.h"
#include "jpeg_decoder.h"
#include "mirror.h"
#include "prepare.h"

namespace {

using custom_op::ColorMode;
using custom_op::DecodeOptions;
using custom_op::JpegDecoder;
using custom_op::JpegInfo;
using custom_op::Status;
using custom_op::StatusCode;
using custom_op::Window;
using Bytes = std::vector<uint8_t>;

const char* mode_name(ColorMode mode) {
  switch (mode) {
    case ColorMode::kRgb:
      return "rgb";
    case ColorMode::kGray:
      return "gray";
    case ColorMode::kUnchanged:
      return "unchanged";
  }
  return "?";
}

std::string describe(const Window& w) {
  return "window (y=" + std::to_string(w.y) + ", x=" + std::to_string(w.x) +
         ", h=" + std::to_string(w.height) + ", w=" + std::to_string(w.width) + ")";
}

// Collects the failures of one test case; the case passes when there are none.
class Case {
 public:
  explicit Case(std::string name) : name_(std::move(name)) {}

  void fail(const std::string& why) {
    if (failures_ < 5) {
      std::printf("FAIL %s: %s\n", name_.c_str(), why.c_str());
    }
    ++failures_;
  }

  void expect(bool condition, const std::string& why) {
    if (!condition) {
      fail(why);
    }
  }

  bool passed() const { return failures_ == 0; }

 private:
  std::string name_;
  int failures_ = 0;
};

// A failed Status from a valid call must be a decode error with a message.
void expect_decode_error(Case* c, const Status& status, const std::string& what) {
  c->expect(status.code == StatusCode::kDecodeError,
            what + " failed with a code other than kDecodeError: " + status.message);
  c->expect(!status.message.empty(), what + " failed without a message");
}

struct Decoded {
  Status status;
  JpegInfo info;
  Bytes pixels;
};

// Reads the header and decodes `window` (the whole image when its height is
// 0) into a buffer of exactly the right size, pre-filled with `fill` so that
// unwritten bytes show up. ASan catches writes past its end.
Decoded decode(const Bytes& file, Window window, ColorMode mode, const DecodeOptions& options,
               uint8_t fill, custom_op::PixelOrder order = custom_op::PixelOrder::kPlanar) {
  Decoded result;
  JpegDecoder decoder(file.data(), file.size(), options);
  result.status = decoder.read_header(&result.info);
  if (!result.status.ok()) {
    return result;
  }
  if (window.height == 0) {
    window = Window{0, 0, result.info.height, result.info.width};
  }
  result.pixels.assign(static_cast<size_t>(custom_op::output_channels(result.info, mode)) *
                           static_cast<size_t>(window.height * window.width),
                       fill);
  result.status = decoder.decode(window, mode, result.pixels.data(), order);
  return result;
}

// HWC pixels rearranged into CHW planes.
Bytes to_planes(const Bytes& interleaved, int channels) {
  Bytes out(interleaved.size());
  const size_t pixels = interleaved.size() / static_cast<size_t>(channels);
  for (size_t i = 0; i < pixels; ++i) {
    for (int c = 0; c < channels; ++c) {
      out[c * pixels + i] = interleaved[i * channels + c];
    }
  }
  return out;
}

// The window `w` cut out of a whole decode, plane by plane.
Bytes cut(const Bytes& whole, const JpegInfo& info, int channels, const Window& w) {
  Bytes out;
  out.reserve(static_cast<size_t>(channels * w.height * w.width));
  const size_t plane = static_cast<size_t>(info.height) * info.width;
  for (int c = 0; c < channels; ++c) {
    for (int64_t y = w.y; y < w.y + w.height; ++y) {
      const auto row = whole.begin() + static_cast<ptrdiff_t>(c * plane + y * info.width + w.x);
      out.insert(out.end(), row, row + w.width);
    }
  }
  return out;
}

// A small deterministic generator, so that a failure names a window that
// the next run tries again.
class Lcg {
 public:
  explicit Lcg(uint64_t seed) : state_(seed * 6364136223846793005ULL + 1442695040888963407ULL) {}
  int64_t below(int64_t n) {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int64_t>((state_ >> 33) % static_cast<uint64_t>(n));
  }

 private:
  uint64_t state_;
};

// Windows at the image's corners and edges, across iMCU boundaries (8 and 16
// pixels), one pixel wide or high, and a few random ones.
std::vector<Window> windows_for(const JpegInfo& info, uint64_t seed) {
  const int64_t h = info.height;
  const int64_t w = info.width;
  auto clip = [&](int64_t y, int64_t x, int64_t wh, int64_t ww) {
    y = std::min(y, h - 1);
    x = std::min(x, w - 1);
    return Window{y, x, std::max<int64_t>(1, std::min(wh, h - y)),
                  std::max<int64_t>(1, std::min(ww, w - x))};
  };
  std::vector<Window> windows = {
      clip(0, 0, 1, 1),
      clip(h - 1, w - 1, 1, 1),
      clip(h / 4, w / 4, h / 2, w / 2),
      clip(0, w / 2, h, 1),
      clip(h / 2, 0, 1, w),
      clip(7, 15, 18, 17),
      clip(16, 16, 16, 16),
      clip(9, 1, h, w - 2),
  };
  Lcg random(seed);
  for (int i = 0; i < 4; ++i) {
    const int64_t y = random.below(h);
    const int64_t x = random.below(w);
    windows.push_back(Window{y, x, 1 + random.below(h - y), 1 + random.below(w - x)});
  }
  return windows;
}

// Windows that do not fit; decode() must refuse them before writing anything.
std::vector<Window> bad_windows_for(const JpegInfo& info) {
  const int64_t h = info.height;
  const int64_t w = info.width;
  return {
      Window{0, 0, 0, w},  Window{0, 0, h, 0},     Window{-1, 0, 1, 1},
      Window{0, -1, 1, 1}, Window{h, 0, 1, 1},     Window{0, w, 1, 1},
      Window{0, 0, h + 1, w}, Window{0, 0, h, w + 1}, Window{1, 1, h, w},
      // Sums of these overflow int64; UBSan reports it if the check forms them.
      Window{INT64_MAX, 0, 1, 1}, Window{0, 0, INT64_MAX, INT64_MAX},
      Window{1, 1, INT64_MAX, INT64_MAX}, Window{INT64_MIN, INT64_MIN, 1, 1},
      Window{0, 0, INT64_MIN, INT64_MIN}, Window{h - 1, w - 1, INT64_MAX, INT64_MAX},
  };
}

// Fuzzer-made headers claim up to 16384 x 16384 pixels; decoding those a
// dozen times under ASan would take minutes and gigabytes and test nothing
// new, so larger images stop at the header, as in fuzz/decode_fuzzer.cc.
constexpr int64_t kMaxPixels = int64_t{1} << 22;

// One file in one mode with one strictness.
bool check_file(const std::string& name, const Bytes& file, ColorMode mode, bool strict,
                uint64_t seed) {
  Case c(name + " [" + mode_name(mode) + (strict ? " strict" : " lenient") + "]");
  DecodeOptions options;
  options.strict = strict;
  options.limits.max_pixels = kMaxPixels;

  // The header alone, destroyed without a decode (LeakSanitizer checks the
  // decompressor is freed), and a decode() without a header.
  JpegInfo info;
  Status header;
  {
    JpegDecoder decoder(file.data(), file.size(), options);
    header = decoder.read_header(&info);
  }
  if (!header.ok()) {
    expect_decode_error(&c, header, "read_header");
    JpegDecoder decoder(file.data(), file.size(), options);
    uint8_t unused = 0;
    c.expect(decoder.decode(Window{0, 0, 1, 1}, mode, &unused).code == StatusCode::kInvalidArgument,
             "decode() without a header did not return kInvalidArgument");
    return c.passed();
  }
  c.expect(info.height >= 1 && info.width >= 1, "the header gave an empty image");
  c.expect(info.channels == 1 || info.channels == 3 || info.channels == 4,
           "the header gave " + std::to_string(info.channels) + " channels");
  const int channels = custom_op::output_channels(info, mode);

  for (const Window& bad : bad_windows_for(info)) {
    JpegDecoder decoder(file.data(), file.size(), options);
    JpegInfo unused;
    if (decoder.read_header(&unused).ok()) {
      // nullptr: a decode() that wrote anything would crash.
      const Status status = decoder.decode(bad, mode, nullptr);
      c.expect(status.code == StatusCode::kInvalidArgument,
               describe(bad) + " was not refused: " + status.message);
    }
  }

  const Decoded whole = decode(file, Window{}, mode, options, 0x00);
  if (whole.status.ok()) {
    const Decoded again = decode(file, Window{}, mode, options, 0xff);
    c.expect(again.status.ok(), "a second whole decode failed: " + again.status.message);
    c.expect(whole.pixels == again.pixels,
             "two whole decodes differ (bytes left unwritten or non-determinism)");
  } else {
    expect_decode_error(&c, whole.status, "the whole decode");
  }

  {
    // A decoder decodes once; the second call is refused.
    JpegDecoder decoder(file.data(), file.size(), options);
    JpegInfo unused;
    if (decoder.read_header(&unused).ok()) {
      Bytes out(static_cast<size_t>(channels));
      decoder.decode(Window{0, 0, 1, 1}, mode, out.data());
      c.expect(decoder.decode(Window{0, 0, 1, 1}, mode, out.data()).code ==
                   StatusCode::kInvalidArgument,
               "a second decode() was not refused");
    }
  }

  {
    // The convenience path agrees with the decoder, and refuses a short buffer.
    const Window all{0, 0, info.height, info.width};
    Bytes out(static_cast<size_t>(channels) * info.height * info.width, 0x33);
    const Status status = custom_op::decode_window(file.data(), file.size(), all, mode, options,
                                                   out.data(), out.size());
    c.expect(status.ok() == whole.status.ok(),
             "decode_window() and JpegDecoder disagree: " + status.message);
    c.expect(!status.ok() || !whole.status.ok() || out == whole.pixels,
             "decode_window() differs from the whole decode");
    c.expect(custom_op::decode_window(file.data(), file.size(), all, mode, options, out.data(),
                                      out.size() - 1)
                     .code == StatusCode::kInvalidArgument,
             "decode_window() accepted a buffer one byte short");
  }

  for (const Window& window : windows_for(info, seed)) {
    const Decoded crop = decode(file, window, mode, options, 0x5a);
    if (!crop.status.ok()) {
      expect_decode_error(&c, crop.status, describe(window));
      c.expect(!whole.status.ok(), describe(window) + " failed although the whole decode succeeded: " +
                                       crop.status.message);
      continue;
    }
    if (whole.status.ok()) {
      c.expect(crop.pixels == cut(whole.pixels, info, channels, window),
               describe(window) + " differs from the same window of the whole decode");
    }
    DecodeOptions sequential = options;
    sequential.seek = false;
    const Decoded ordinary = decode(file, window, mode, sequential, 0xa5);
    c.expect(!ordinary.status.ok() || crop.pixels == ordinary.pixels,
             describe(window) + " differs between seek=true and seek=false");
    // HWC output (libjpeg writing into it directly when the region is the
    // window) holds the same pixels as the planes.
    const Decoded hwc = decode(file, window, mode, options, 0x3c, custom_op::PixelOrder::kInterleaved);
    c.expect(hwc.status.ok(), describe(window) + " failed in HWC order: " + hwc.status.message);
    c.expect(!hwc.status.ok() || to_planes(hwc.pixels, channels) == crop.pixels,
             describe(window) + " differs between HWC and CHW order");
  }
  return c.passed();
}

// A prepared copy must decode to its original's pixels in every mode.
bool check_prepared(const std::string& name, const Bytes& original, const Bytes& prepared) {
  Case c(name + " [prepared is lossless]");
  DecodeOptions options;
  options.limits.max_pixels = kMaxPixels;
  options.seek = false;
  for (ColorMode mode : {ColorMode::kRgb, ColorMode::kGray, ColorMode::kUnchanged}) {
    const Decoded before = decode(original, Window{}, mode, options, 0x00);
    const Decoded after = decode(prepared, Window{}, mode, options, 0xff);
    c.expect(after.status.ok() || !before.status.ok(),
             std::string("the prepared copy fails in mode ") + mode_name(mode) + ": " +
                 after.status.message);
    c.expect(!before.status.ok() || !after.status.ok() || before.pixels == after.pixels,
             std::string("the prepared copy's pixels differ in mode ") + mode_name(mode));
  }
  return c.passed();
}

std::vector<size_t> scan_offsets(const Bytes& file);

// The offsets of the RSTn markers after the first SOS, if the markers parse.
std::vector<size_t> restart_offsets(const Bytes& file) {
  const std::vector<size_t> scans = scan_offsets(file);
  std::vector<size_t> found;
  if (scans.empty()) {
    return found;
  }
  for (size_t pos = scans[0] + 2; pos + 1 < file.size(); ++pos) {
    if (file[pos] == 0xff && (file[pos + 1] & 0xf8) == 0xd0) {
      found.push_back(pos);
    }
  }
  return found;
}

// Copies of a file with restart markers whose markers are damaged: one
// renumbered, one removed, all shifted by one, the data cut after a marker.
std::vector<std::pair<std::string, Bytes>> damaged_markers(const Bytes& file) {
  std::vector<std::pair<std::string, Bytes>> copies;
  const std::vector<size_t> markers = restart_offsets(file);
  if (markers.empty()) {
    return copies;
  }
  const size_t middle = markers[markers.size() / 2];
  Bytes renumbered = file;
  renumbered[middle + 1] = static_cast<uint8_t>(0xd0 | ((renumbered[middle + 1] + 3) & 7));
  copies.emplace_back("one marker renumbered", std::move(renumbered));
  Bytes removed = file;
  removed.erase(removed.begin() + static_cast<ptrdiff_t>(middle),
                removed.begin() + static_cast<ptrdiff_t>(middle + 2));
  copies.emplace_back("one marker removed", std::move(removed));
  Bytes shifted = file;
  for (size_t offset : markers) {
    shifted[offset + 1] = static_cast<uint8_t>(0xd0 | ((shifted[offset + 1] + 1) & 7));
  }
  copies.emplace_back("all markers shifted", std::move(shifted));
  copies.emplace_back("cut after a marker",
                      Bytes(file.begin(), file.begin() + static_cast<ptrdiff_t>(middle + 2)));
  return copies;
}

// The offset of every SOS marker in `file`, or nothing if its markers do not
// parse. Entropy-coded data ends at the first 0xFF that is followed by
// neither a stuffed 0x00 nor a restart marker.
std::vector<size_t> scan_offsets(const Bytes& file) {
  std::vector<size_t> scans;
  size_t pos = 2;
  while (pos + 4 <= file.size() && file[pos] == 0xff) {
    const uint8_t marker = file[pos + 1];
    if (marker == 0xd9) {
      return scans;
    }
    size_t end = pos + 2 + (static_cast<size_t>(file[pos + 2]) << 8 | file[pos + 3]);
    if (marker == 0xda) {
      scans.push_back(pos);
      while (end + 1 < file.size() &&
             !(file[end] == 0xff && file[end + 1] != 0x00 && (file[end + 1] & 0xf8) != 0xd0)) {
        ++end;
      }
    }
    pos = end;
  }
  return {};
}

// max_pixels, max_scans and max_memory, once per file.
bool check_limits(const std::string& name, const Bytes& file) {
  Case c(name + " [limits]");
  DecodeOptions options;
  JpegInfo info;
  {
    JpegDecoder decoder(file.data(), file.size(), options);
    if (!decoder.read_header(&info).ok()) {
      return true;
    }
  }
  const int64_t pixels = static_cast<int64_t>(info.height) * info.width;
  options.limits.max_pixels = pixels;
  {
    JpegDecoder decoder(file.data(), file.size(), options);
    JpegInfo unused;
    const Status status = decoder.read_header(&unused);
    c.expect(status.ok(), "max_pixels equal to the image's pixels refused it: " + status.message);
  }
  if (pixels > 1) {
    options.limits.max_pixels = pixels - 1;
    JpegDecoder decoder(file.data(), file.size(), options);
    JpegInfo unused;
    const Status status = decoder.read_header(&unused);
    c.expect(!status.ok() && status.message.find("max_pixels") != std::string::npos,
             "max_pixels one below the image's pixels gave: " + status.message);
  }
  // A progressive file of several scans that decodes must fail at the
  // second scan under max_scans=1 (damaged files may fail earlier).
  options.limits.max_pixels = kMaxPixels;
  options.strict = false;
  if (info.progressive && pixels <= kMaxPixels && scan_offsets(file).size() >= 2 &&
      decode(file, Window{}, ColorMode::kRgb, options, 0).status.ok()) {
    options.limits.max_scans = 1;
    const Decoded result = decode(file, Window{}, ColorMode::kRgb, options, 0);
    c.expect(!result.status.ok() && result.status.message.find("max_scans") != std::string::npos,
             "max_scans=1 on a progressive file gave: " +
                 (result.status.ok() ? std::string("success") : result.status.message));
  }
  // max_memory: one byte below the estimate read_header makes is refused,
  // with the needed value in the message, before anything is decoded; the
  // estimate itself is accepted (and libjpeg's own accounting agrees).
  options = DecodeOptions{};
  options.limits.max_pixels = kMaxPixels;
  options.limits.max_memory = 1;
  {
    JpegDecoder decoder(file.data(), file.size(), options);
    JpegInfo unused;
    const Status status = decoder.read_header(&unused);
    const std::string hint = "a max_memory of ";
    const size_t at = status.message.find(hint);
    c.expect(!status.ok() && at != std::string::npos, "max_memory=1 gave: " + status.message);
    if (pixels <= kMaxPixels && at != std::string::npos) {
      const int64_t needed = std::stoll(status.message.substr(at + hint.size()));
      options.limits.max_memory = needed - 1;
      JpegDecoder below(file.data(), file.size(), options);
      const Status refused = below.read_header(&unused);
      c.expect(!refused.ok() && refused.message.find("max_memory") != std::string::npos,
               "max_memory one below the estimate gave: " + refused.message);
      options.limits.max_memory = needed;
      const Decoded whole = decode(file, Window{}, ColorMode::kRgb, options, 0);
      c.expect(whole.status.message.find("max_memory") == std::string::npos,
               "the estimate itself was refused: " + whole.status.message);
    }
  }
  return c.passed();
}

// decode_resized of `window` to out_height x out_width at scale_num / 8,
// into a buffer pre-filled with `fill`.
Decoded decode_resized(const Bytes& file, const Window& window, ColorMode mode,
                       const DecodeOptions& options, int scale_num, int out_height, int out_width,
                       uint8_t fill, custom_op::PixelOrder order = custom_op::PixelOrder::kPlanar) {
  Decoded result;
  JpegDecoder decoder(file.data(), file.size(), options);
  result.status = decoder.read_header(&result.info);
  if (!result.status.ok()) {
    return result;
  }
  result.pixels.assign(static_cast<size_t>(custom_op::output_channels(result.info, mode)) *
                           static_cast<size_t>(out_height) * out_width,
                       fill);
  result.status = decoder.decode_resized(window, mode, scale_num, out_height, out_width,
                                         /*antialias=*/true, result.pixels.data(), order);
  return result;
}

// The resized path at every DCT scale, once per valid file: each window's
// result is the same twice (pre-filled differently: no byte left unwritten,
// nothing read from memory libjpeg did not write; valgrind, `make valgrind`,
// sees the rest) and equals, bit for bit, the same window decoded from every
// column at that scale (crop_columns=false, which never calls
// jpeg_crop_scanline) and resized by the same rule. libjpeg-turbo < 3.0.0
// spoils 4x2 and 2x4 files here unless the decoder works around it
// (csrc/crop_quirk.h).
bool check_resized(const std::string& name, const Bytes& file) {
  Case c(name + " [resized]");
  DecodeOptions options;
  options.limits.max_pixels = kMaxPixels;
  const Decoded whole = decode(file, Window{}, ColorMode::kRgb, options, 0);
  if (!whole.status.ok()) {
    return true;
  }
  const int64_t height = whole.info.height;
  const int64_t width = whole.info.width;
  const std::vector<Window> windows = {
      Window{0, 0, height, width},
      Window{height / 5, width / 3, height - height / 5 - height / 7, std::max<int64_t>(1, width / 2)},
      Window{height / 2, width - std::max<int64_t>(1, width / 6), (height + 1) / 2,
             std::max<int64_t>(1, width / 6)},
      Window{0, width / 2, 1, 1},
  };
  DecodeOptions every_column = options;
  every_column.crop_columns = false;
  for (ColorMode mode : {ColorMode::kRgb, ColorMode::kGray}) {
    for (int scale = 1; scale <= 8; ++scale) {
      for (const Window& w : windows) {
        const int out_height = static_cast<int>(std::max<int64_t>(1, w.height * scale / 8));
        const int out_width = static_cast<int>(std::max<int64_t>(1, w.width * scale / 8));
        const std::string what = describe(w) + " at " + std::to_string(scale) + "/8 in " +
                                 mode_name(mode);
        const Decoded ours = decode_resized(file, w, mode, options, scale, out_height, out_width, 0);
        if (!ours.status.ok()) {
          c.fail(what + " failed: " + ours.status.message);
          continue;
        }
        const Decoded again =
            decode_resized(file, w, mode, options, scale, out_height, out_width, 0xff);
        c.expect(again.status.ok() && again.pixels == ours.pixels,
                 what + " differs between two calls");
        const Decoded reference =
            decode_resized(file, w, mode, every_column, scale, out_height, out_width, 0x77);
        c.expect(reference.status.ok() && reference.pixels == ours.pixels,
                 what + " differs from the window of a decode of every column");
      }
    }
  }
  return c.passed();
}

// What a window of an EXIF-turned file asks of the core: the stored window,
// often 1 to 3 pixels on a side (a displayed window 1 pixel wide of a
// transposed file is 1 pixel high here), decoded exactly or resized at a
// reduced scale, in HWC order (the Python layer turns it), in every mode,
// 1-channel ones included. Each result is the same twice (pre-filled
// differently) and, in HWC, the planar result's pixels: under `make
// valgrind` memcheck reports any of them computed from memory never written.
bool check_narrow_windows(const std::string& name, const Bytes& file) {
  Case c(name + " [narrow windows]");
  DecodeOptions options;
  options.limits.max_pixels = kMaxPixels;
  const Decoded whole = decode(file, Window{}, ColorMode::kRgb, options, 0);
  if (!whole.status.ok()) {
    return true;
  }
  const int64_t height = whole.info.height;
  const int64_t width = whole.info.width;
  std::vector<Window> windows = {Window{height / 3, 0, 1, width}, Window{0, width / 3, height, 1}};
  for (int64_t h = 1; h <= std::min<int64_t>(3, height); ++h) {
    for (int64_t w = 1; w <= std::min<int64_t>(3, width); ++w) {
      windows.push_back(Window{height - h, width - w, h, w});
    }
  }
  const std::pair<int, int> sizes[] = {{1, 1}, {1, 2}, {2, 1}, {3, 3}};
  using custom_op::PixelOrder;
  for (ColorMode mode : {ColorMode::kGray, ColorMode::kUnchanged, ColorMode::kRgb}) {
    const int channels = custom_op::output_channels(whole.info, mode);
    for (const Window& w : windows) {
      const Decoded planes = decode(file, w, mode, options, 0x11, PixelOrder::kPlanar);
      const Decoded rows = decode(file, w, mode, options, 0xee, PixelOrder::kInterleaved);
      c.expect(planes.status.ok() && rows.status.ok() && to_planes(rows.pixels, channels) == planes.pixels,
               describe(w) + " in " + mode_name(mode) + ": HWC differs from CHW");
      for (int scale : {1, 2, 4}) {
        for (const auto& [out_height, out_width] : sizes) {
          const std::string what = describe(w) + " to " + std::to_string(out_height) + "x" +
                                   std::to_string(out_width) + " at " + std::to_string(scale) +
                                   "/8 in " + mode_name(mode);
          const Decoded first = decode_resized(file, w, mode, options, scale, out_height, out_width,
                                               0, PixelOrder::kInterleaved);
          const Decoded second = decode_resized(file, w, mode, options, scale, out_height,
                                                out_width, 0xff, PixelOrder::kInterleaved);
          const Decoded planar = decode_resized(file, w, mode, options, scale, out_height,
                                                out_width, 0x77);
          c.expect(first.status.ok() && second.status.ok() && planar.status.ok(),
                   what + " failed: " + first.status.message);
          c.expect(first.pixels == second.pixels, what + " differs between two calls");
          c.expect(to_planes(first.pixels, channels) == planar.pixels,
                   what + ": HWC differs from CHW");
        }
      }
    }
  }
  return c.passed();
}

// decode_grid_crop of `crop` into a buffer pre-filled with `fill`.
Decoded grid_crop(const Bytes& file, const custom_op::GridCrop& crop, ColorMode mode,
                  custom_op::PixelOrder order, uint8_t fill) {
  Decoded result;
  DecodeOptions options;
  options.limits.max_pixels = kMaxPixels;
  JpegDecoder decoder(file.data(), file.size(), options);
  result.status = decoder.read_header(&result.info);
  if (!result.status.ok()) {
    return result;
  }
  result.pixels.assign(static_cast<size_t>(custom_op::output_channels(result.info, mode)) *
                           static_cast<size_t>(crop.rect.height * crop.rect.width),
                       fill);
  result.status = custom_op::decode_grid_crop(&decoder, result.info, crop, mode, order,
                                              result.pixels.data());
  return result;
}

// The rectangle `r` of an image `width` pixels wide, in either order.
Bytes cut_rect(const Bytes& image, int64_t height, int64_t width, int channels,
               custom_op::PixelOrder order, const Window& r) {
  Bytes out;
  if (order == custom_op::PixelOrder::kInterleaved) {
    for (int64_t y = r.y; y < r.y + r.height; ++y) {
      const auto row = image.begin() + static_cast<ptrdiff_t>((y * width + r.x) * channels);
      out.insert(out.end(), row, row + r.width * channels);
    }
    return out;
  }
  JpegInfo shape;
  shape.height = static_cast<int>(height);
  shape.width = static_cast<int>(width);
  return cut(image, shape, channels, r);
}

// Rectangles of a grid: the corners, a single sample, a row, a column, the
// middle, and a random one.
std::vector<Window> grid_rects(int64_t h, int64_t w, uint64_t seed) {
  std::vector<Window> rects = {
      Window{0, 0, (h + 1) / 2, (w + 1) / 2}, Window{h / 2, w / 2, h - h / 2, w - w / 2},
      Window{h - 1, 0, 1, 1},                 Window{h / 3, 0, 1, w},
      Window{0, w - 1, h, 1},                 Window{h / 4, w / 4, std::max<int64_t>(1, h / 2),
                                                     std::max<int64_t>(1, w / 2)},
  };
  Lcg random(seed);
  const int64_t y = random.below(h);
  const int64_t x = random.below(w);
  rects.push_back(Window{y, x, 1 + random.below(h - y), 1 + random.below(w - x)});
  return rects;
}

// Grid crops, once per valid file: for grids smaller, larger, one row high
// and of the image's height (that axis is copied, not resampled), the whole
// grid is the same twice (pre-filled differently: no byte left unwritten),
// its HWC and CHW outputs agree, and every rectangle equals the same
// rectangle cut from the whole grid, bit for bit.
bool check_grid(const std::string& name, const Bytes& file, uint64_t seed) {
  Case c(name + " [grid crop]");
  JpegInfo info;
  {
    DecodeOptions options;
    options.limits.max_pixels = kMaxPixels;
    JpegDecoder decoder(file.data(), file.size(), options);
    if (!decoder.read_header(&info).ok() ||
        !decode(file, Window{}, ColorMode::kRgb, options, 0).status.ok()) {
      return true;
    }
  }
  const int64_t h = info.height;
  const int64_t w = info.width;
  const std::vector<std::pair<int64_t, int64_t>> grids = {
      {std::max<int64_t>(1, h * 2 / 5), std::max<int64_t>(1, w / 3)},
      {h * 3 / 2 + 1, w * 2 - 1},
      {1, w / 2 + 1},
      {h, std::max<int64_t>(1, w * 2 / 3)},
  };
  using custom_op::PixelOrder;
  for (const auto& [grid_height, grid_width] : grids) {
    for (ColorMode mode : {ColorMode::kRgb, ColorMode::kGray, ColorMode::kUnchanged}) {
      const int channels = custom_op::output_channels(info, mode);
      for (bool antialias : {true, false}) {
        const custom_op::GridCrop all{grid_height, grid_width, Window{0, 0, grid_height, grid_width},
                                      antialias};
        const std::string what = "grid " + std::to_string(grid_height) + "x" +
                                 std::to_string(grid_width) + " in " + mode_name(mode) +
                                 (antialias ? " antialiased" : " plain");
        const Decoded whole = grid_crop(file, all, mode, PixelOrder::kPlanar, 0x00);
        if (!whole.status.ok()) {
          c.fail(what + " failed: " + whole.status.message);
          continue;
        }
        const Decoded again = grid_crop(file, all, mode, PixelOrder::kPlanar, 0xff);
        c.expect(again.status.ok() && again.pixels == whole.pixels,
                 what + " differs between two calls");
        const Decoded whole_hwc = grid_crop(file, all, mode, PixelOrder::kInterleaved, 0x5a);
        c.expect(whole_hwc.status.ok() && to_planes(whole_hwc.pixels, channels) == whole.pixels,
                 what + " differs between HWC and CHW order");
        for (const Window& rect : grid_rects(grid_height, grid_width, ++seed)) {
          for (PixelOrder order : {PixelOrder::kPlanar, PixelOrder::kInterleaved}) {
            const Decoded& reference = order == PixelOrder::kPlanar ? whole : whole_hwc;
            if (!reference.status.ok()) {
              continue;
            }
            const custom_op::GridCrop crop{grid_height, grid_width, rect, antialias};
            const Decoded part = grid_crop(file, crop, mode, order, 0xa5);
            const std::string where = what + ", " + describe(rect) +
                                      (order == PixelOrder::kPlanar ? " CHW" : " HWC");
            c.expect(part.status.ok(), where + " failed: " + part.status.message);
            c.expect(!part.status.ok() ||
                         part.pixels == cut_rect(reference.pixels, grid_height, grid_width,
                                                 channels, order, rect),
                     where + " differs from the same rectangle of the whole grid");
          }
        }
      }
    }
  }
  return c.passed();
}

// The resize passes at every kernel level the CPU runs against the portable
// ones, on random pixels, for 1, 3 and 4 bytes per pixel and for grids that
// shrink (several taps) and enlarge (two), rectangles at odd offsets, and
// row counts and widths that leave every SIMD loop a tail.
// The batch's flip against the obvious loop, for every row length up to 70
// (the word swaps, their byte-by-byte middle, both ends) and 1, 3 and 4
// bytes per pixel in both orders.
bool check_mirror() {
  Case c("mirror_left_right");
  Lcg random(7);
  for (int64_t width = 1; width <= 70; ++width) {
    for (int64_t channels : {1, 3, 4}) {
      for (custom_op::PixelOrder order : {custom_op::PixelOrder::kPlanar, custom_op::PixelOrder::kInterleaved}) {
        const int64_t height = 3;
        Bytes pixels(static_cast<size_t>(channels * height * width));
        for (uint8_t& v : pixels) {
          v = static_cast<uint8_t>(random.below(256));
        }
        Bytes expected(pixels.size());
        for (int64_t ch = 0; ch < channels; ++ch) {
          for (int64_t y = 0; y < height; ++y) {
            for (int64_t x = 0; x < width; ++x) {
              auto at = [&](int64_t column) {
                return static_cast<size_t>(order == custom_op::PixelOrder::kPlanar
                                               ? (ch * height + y) * width + column
                                               : (y * width + column) * channels + ch);
              };
              expected[at(x)] = pixels[at(width - 1 - x)];
            }
          }
        }
        custom_op::mirror_left_right(pixels.data(), channels, height, width, order);
        c.expect(pixels == expected, "width " + std::to_string(width) + ", " + std::to_string(channels) +
                                         " channels, " +
                                         (order == custom_op::PixelOrder::kPlanar ? "planar" : "interleaved"));
      }
    }
  }
  return c.passed();
}

bool check_kernels() {
  using custom_op::GridTaps;
  using custom_op::KernelLevel;
  Case c("resize kernels");
  const KernelLevel best = custom_op::best_kernel_level();
  std::printf("core_test: resize kernels up to %s\n",
              best == KernelLevel::kAvx2 ? "AVX2" : best == KernelLevel::kSse2 ? "SSE2" : "portable (no SIMD level to compare)");
  Lcg random(20261201);
  const std::vector<std::pair<int64_t, int64_t>> axes = {{375, 256}, {500, 341}, {61, 20},
                                                         {33, 97}, {7, 3}, {1000, 37}, {5, 5}};
  for (int trial = 0; trial < 60; ++trial) {
    const auto [in_h, grid_h] = axes[static_cast<size_t>(random.below(static_cast<int64_t>(axes.size())))];
    const auto [in_w, grid_w] = axes[static_cast<size_t>(random.below(static_cast<int64_t>(axes.size())))];
    const bool antialias = random.below(2) == 1;
    const int64_t rect_h = 1 + random.below(grid_h);
    const int64_t rect_w = 1 + random.below(grid_w);
    const GridTaps ty = custom_op::grid_taps(in_h, grid_h, random.below(grid_h - rect_h + 1), rect_h, antialias);
    const GridTaps tx = custom_op::grid_taps(in_w, grid_w, random.below(grid_w - rect_w + 1), rect_w, antialias);
    if (ty.identity || tx.identity) {
      continue;
    }
    const int64_t rows = ty.in_end - ty.in_first;
    const int64_t cols = tx.in_end - tx.in_first;
    for (int channels : {1, 3, 4}) {
      Bytes in(static_cast<size_t>(rows * cols * channels));
      for (uint8_t& v : in) {
        v = static_cast<uint8_t>(random.below(256));
      }
      const size_t out_row = static_cast<size_t>(rect_w * channels);
      std::vector<Bytes> widened;
      std::vector<Bytes> resized;
      for (KernelLevel level : {KernelLevel::kPortable, KernelLevel::kSse2, KernelLevel::kAvx2}) {
        if (static_cast<int>(level) > static_cast<int>(best)) {
          break;
        }
        widened.emplace_back(static_cast<size_t>(rows) * out_row, 0x5a);
        resized.emplace_back(static_cast<size_t>(rect_h) * out_row, 0xa5);
        custom_op::detail::resample_rows_fixed(in.data(), static_cast<size_t>(cols * channels), rows,
                                               channels, tx, widened.back().data(), out_row, level);
        custom_op::detail::resample_columns_fixed(widened.back().data(), out_row, ty,
                                                  resized.back().data(), level);
      }
      const std::string what = std::to_string(in_h) + "x" + std::to_string(in_w) + " -> rect " +
                               std::to_string(rect_h) + "x" + std::to_string(rect_w) + " of " +
                               std::to_string(grid_h) + "x" + std::to_string(grid_w) + ", " +
                               std::to_string(channels) + " bytes per pixel";
      for (size_t level = 1; level < widened.size(); ++level) {
        c.expect(widened[level] == widened[0], "width pass, level " + std::to_string(level) + ": " + what);
        c.expect(resized[level] == resized[0], "height pass, level " + std::to_string(level) + ": " + what);
      }
    }
  }
  return c.passed();
}

// Damaged copies: truncations, and single bit flips near the start (the
// markers) and in the second half (usually entropy-coded data). For a
// progressive file also a valid one: its first scans, then EOI, as an encoder
// may write when it stops refining (libjpeg then smooths the blocks).
std::vector<std::pair<std::string, Bytes>> damaged_copies(const Bytes& file) {
  std::vector<std::pair<std::string, Bytes>> copies;
  const size_t n = file.size();
  const std::vector<size_t> scans = scan_offsets(file);
  if (scans.size() >= 2) {
    const size_t keep = scans.size() / 2;
    Bytes shortened(file.begin(), file.begin() + static_cast<ptrdiff_t>(scans[keep]));
    shortened.push_back(0xff);
    shortened.push_back(0xd9);
    copies.emplace_back("first " + std::to_string(keep) + " scans", std::move(shortened));
  }
  for (size_t divisor : {2, 3, 4}) {
    copies.emplace_back("truncated to len/" + std::to_string(divisor),
                        Bytes(file.begin(), file.begin() + static_cast<ptrdiff_t>(n / divisor)));
  }
  if (n > 2) {
    copies.emplace_back("without EOI", Bytes(file.begin(), file.end() - 2));
  }
  for (size_t offset : {n / 16, n / 8, n / 2 + 3, n - n / 5}) {
    if (offset < n) {
      Bytes flipped = file;
      flipped[offset] ^= static_cast<uint8_t>(1u << (offset % 8));
      copies.emplace_back("bit flipped at " + std::to_string(offset), std::move(flipped));
    }
  }
  return copies;
}

}  // namespace

// The index checks use the helpers above.
#include "index_checks.h"
#include "scan_checks.h"

namespace {

std::vector<std::string> list_inputs(int argc, char** argv) {
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(arg)) {
        const std::string file_name = entry.path().filename().string();
        if (entry.is_regular_file() && file_name[0] != '.' && file_name != "README.md") {
          paths.push_back(entry.path().string());
        }
      }
    } else if (std::filesystem::is_regular_file(arg)) {
      paths.push_back(arg.string());
    } else {
      std::printf("core_test: %s is neither a file nor a folder\n", argv[i]);
    }
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

Bytes read_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH...  (JPEG files or folders of them)\n", argv[0]);
    return 2;
  }
  std::printf("core_test: custom_op core over libjpeg-turbo %s\n", custom_op::libjpeg_turbo_version());
  const std::vector<std::string> paths = list_inputs(argc, argv);
  int passed = 0;
  int failed = 0;
  auto count = [&](bool ok) { ok ? ++passed : ++failed; };
  count(check_kernels());
  count(check_mirror());
  count(check_index_coding());
  count(check_random_scans());
  uint64_t seed = 0;
  Bytes previous_index;  // Another file's index, which each file's decode must refuse.
  for (const std::string& path : paths) {
    const Bytes file = read_file(path);
    std::vector<std::pair<std::string, Bytes>> inputs = {{path, file}};
    for (auto& [what, bytes] : damaged_copies(file)) {
      inputs.emplace_back(path + " " + what, std::move(bytes));
    }
    count(check_limits(path, file));
    count(check_resized(path, file));
    count(check_narrow_windows(path, file));
    count(check_grid(path, file, seed));
    count(check_index(path, file, previous_index, seed));
    count(check_scan_reader(path, file, seed));
    if (const Bytes index = index_of(file); !index.empty()) {
      previous_index = index;
    }
    Bytes prepared;
    custom_op::PrepareInfo prepare_info;
    custom_op::PrepareOptions prepare_options;
    prepare_options.limits.max_pixels = kMaxPixels;
    if (custom_op::prepare_jpeg(file.data(), file.size(), prepare_options, &prepared,
                                &prepare_info)
            .ok()) {
      count(check_prepared(path, file, prepared));
      for (auto& [what, bytes] : damaged_markers(prepared)) {
        inputs.emplace_back(path + " prepared, " + what, std::move(bytes));
      }
      inputs.emplace_back(path + " prepared", std::move(prepared));
    }
    for (const auto& [name, bytes] : inputs) {
      ++seed;
      for (ColorMode mode : {ColorMode::kRgb, ColorMode::kGray, ColorMode::kUnchanged}) {
        for (bool strict : {true, false}) {
          count(check_file(name, bytes, mode, strict, seed));
        }
      }
    }
  }
  std::printf("%zu files read\n", paths.size());
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 && !paths.empty() ? 0 : 1;
}
