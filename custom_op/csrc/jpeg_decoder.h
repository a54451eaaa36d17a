// The torch-free core of custom_op: reads a JPEG header and decodes one
// window of the image into caller-owned CHW memory with libjpeg-turbo.
//
// It sees only libjpeg and raw memory, so a plain C++ test or a fuzzer can
// drive it without Python or torch. The pybind11 binding lives in
// decode_and_crop_jpeg.cpp, which includes this header.
#pragma once

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first.
#include <cstring>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <jerror.h>

#include "resample.h"
#include "restart_seek.h"

#if !defined(LIBJPEG_TURBO_VERSION_NUMBER) || LIBJPEG_TURBO_VERSION_NUMBER < 2000006
#error "custom_op needs libjpeg-turbo 2.0.6 or newer (older crop/skip code has known crashes). Debian/Ubuntu: apt-get install libjpeg62-turbo-dev (Ubuntu: libjpeg-turbo8-dev); conda: conda install -c conda-forge libjpeg-turbo"
#endif

#define CUSTOM_OP_STRINGIFY_IMPL(x) #x
#define CUSTOM_OP_STRINGIFY(x) CUSTOM_OP_STRINGIFY_IMPL(x)

namespace custom_op {

// The libjpeg-turbo these headers belong to, e.g. "2.1.5".
inline const char* libjpeg_turbo_version() {
  return CUSTOM_OP_STRINGIFY(LIBJPEG_TURBO_VERSION);
}

enum class ColorMode : int { kRgb = 0, kGray = 1, kUnchanged = 2 };

struct Limits {
  // 16384 x 16384. Checked right after the header, before libjpeg allocates
  // anything proportional to the image, so a few bytes claiming 65500 x 65500
  // pixels fail in microseconds.
  int64_t max_pixels = int64_t{1} << 28;
  // A normal progressive file has about 10 scans; thousands of tiny scans are
  // a known way to make a decoder spin (TurboJPEG 3 and DALI cap them too).
  int64_t max_scans = 256;
};

struct DecodeOptions {
  // Raise on libjpeg warnings that mean damaged pixels (see is_harmless_warning).
  bool strict = true;
  Limits limits;
  // Widen the decoded region so that its edge columns match a full decode
  // (see region_for). Only tests turn it off, to show the cure is needed.
  bool exact_edges = true;
  // Decode only the restart segments that cover the window when the file
  // allows it (see restart_seek.h). The pixels are the same either way.
  bool seek = true;
};

// What the header says. `channels` is what ColorMode::kUnchanged yields.
struct JpegInfo {
  int height = 0;
  int width = 0;
  int channels = 0;
  J_COLOR_SPACE color_space = JCS_UNKNOWN;
  int max_h_samp_factor = 1;
  int max_v_samp_factor = 1;
  bool progressive = false;
};

// A window of the image, in pixels of the full-size image.
struct Window {
  int64_t y = 0;
  int64_t x = 0;
  int64_t height = 0;
  int64_t width = 0;
};

enum class StatusCode { kOk, kInvalidArgument, kDecodeError };

struct Status {
  StatusCode code = StatusCode::kOk;
  std::string message;
  bool ok() const { return code == StatusCode::kOk; }
};

namespace detail {

// Note [libjpeg error handling]
// -----------------------------
// libjpeg reports errors by calling error_exit, which must not return. We
// longjmp from it back to the function that armed the jump point. Three rules
// keep that sound in C++:
//
// 1. A function that calls setjmp (the *_guarded functions below) holds no
//    object with a destructor, and after the jump reads no local that it
//    changed after setjmp: the C standard leaves such locals indeterminate.
//    On a jump it only returns false; all state lives in memory owned by
//    JpegDecoder, whose destructor runs normally.
// 2. The callbacks format libjpeg's message into ErrorManager and longjmp.
//    They never throw: unwinding a C++ exception through libjpeg's C frames
//    depends on how libjpeg was compiled.
// 3. Every allocation made while a jump point is armed belongs to libjpeg's
//    pools (e.g. the row buffer comes from alloc_sarray), so
//    jpeg_destroy_decompress, called exactly once by ~JpegDecoder, frees it
//    whatever path the decode took. The output memory belongs to the caller.
struct ErrorManager {
  jpeg_error_mgr pub;  // First member: libjpeg sees a jpeg_error_mgr*.
  std::jmp_buf jump;
  bool strict = true;
  // Appended to a warning raised as an error: says how to accept it.
  const char* strict_hint =
      "strict=True treats this libjpeg warning as an error; pass strict=False to accept damaged data";
  char message[JMSG_LENGTH_MAX + 160] = {0};
};

struct ProgressMonitor {
  jpeg_progress_mgr pub;  // First member: libjpeg sees a jpeg_progress_mgr*.
  int64_t max_scans = 0;
};

inline ErrorManager* error_manager(j_common_ptr cinfo) {
  return reinterpret_cast<ErrorManager*>(cinfo->err);
}

// Jumps back to the armed setjmp with `message`. See Note [libjpeg error handling].
[[noreturn]] inline void fail_with(j_common_ptr cinfo, const char* message) {
  ErrorManager* err = error_manager(cinfo);
  std::snprintf(err->message, sizeof(err->message), "%s", message);
  std::longjmp(err->jump, 1);
}

[[noreturn]] inline void error_exit_cb(j_common_ptr cinfo) {
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  fail_with(cinfo, text);
}

// Warnings that cannot change a decoded pixel: junk between markers (common
// in files written by cameras and editors) and metadata oddities.
inline bool is_harmless_warning(int msg_code) {
  return msg_code == JWRN_EXTRANEOUS_DATA || msg_code == JWRN_JFIF_MAJOR ||
         msg_code == JWRN_BOGUS_ICC;
}

// libjpeg calls this with msg_level -1 for warnings (corrupt or missing data,
// after which it goes on with made-up coefficients) and >= 0 for traces.
inline void emit_message_cb(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) {
    return;  // Trace messages: never shown.
  }
  ErrorManager* err = error_manager(cinfo);
  cinfo->err->num_warnings++;
  if (!err->strict || is_harmless_warning(cinfo->err->msg_code)) {
    return;
  }
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  char message[sizeof(err->message)];
  std::snprintf(message, sizeof(message), "%s (%s)", text, err->strict_hint);
  fail_with(cinfo, message);
}

inline void progress_monitor_cb(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) {
    return;
  }
  auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  auto* monitor = reinterpret_cast<ProgressMonitor*>(cinfo->progress);
  if (dinfo->input_scan_number > monitor->max_scans) {
    char message[160];
    std::snprintf(message, sizeof(message),
                  "the file has more than %lld scans (limit max_scans=%lld)",
                  static_cast<long long>(monitor->max_scans),
                  static_cast<long long>(monitor->max_scans));
    fail_with(cinfo, message);
  }
}

// The number of channels ColorMode::kUnchanged yields for a JPEG colour
// space, or 0 when custom_op cannot decode it.
inline int stored_channels(J_COLOR_SPACE space) {
  switch (space) {
    case JCS_GRAYSCALE:
      return 1;
    case JCS_YCbCr:
    case JCS_RGB:
      return 3;
    case JCS_CMYK:
    case JCS_YCCK:
      return 4;
    default:
      return 0;
  }
}

// The largest horizontal and vertical sampling factors of `count` components.
inline void max_sampling_factors(const jpeg_component_info* components, int count, int* max_h,
                                 int* max_v) {
  *max_h = 1;
  *max_v = 1;
  for (int c = 0; c < count; ++c) {
    *max_h = std::max(*max_h, components[c].h_samp_factor);
    *max_v = std::max(*max_v, components[c].v_samp_factor);
  }
}

inline bool is_cmyk(J_COLOR_SPACE space) {
  return space == JCS_CMYK || space == JCS_YCCK;
}

// How libjpeg lays out the samples of one decoded row.
enum class RowLayout {
  kGray,  // 1 byte per pixel.
  kRgbx,  // R, G, B and an unused byte: the fourth byte makes the split into
          // planes a vectorised 4-byte gather, several times faster than
          // splitting 3-byte pixels, at no cost in libjpeg's SIMD colour
          // conversion. The samples are those of JCS_RGB, bit for bit.
  kCmyk,  // C, M, Y, K as stored (Adobe-inverted: 255 means no ink).
};

// What libjpeg should output for a mode. CMYK and YCCK always come out as
// CMYK: libjpeg cannot convert them to RGB or gray, so emit_row does.
inline RowLayout row_layout(J_COLOR_SPACE stored, ColorMode mode) {
  if (is_cmyk(stored)) {
    return RowLayout::kCmyk;
  }
  if (mode == ColorMode::kGray || (mode == ColorMode::kUnchanged && stored == JCS_GRAYSCALE)) {
    return RowLayout::kGray;
  }
  return RowLayout::kRgbx;
}

inline J_COLOR_SPACE libjpeg_output_space(RowLayout layout) {
  switch (layout) {
    case RowLayout::kGray:
      return JCS_GRAYSCALE;
    case RowLayout::kRgbx:
      return JCS_EXT_RGBX;
    case RowLayout::kCmyk:
      return JCS_CMYK;
  }
  return JCS_UNKNOWN;
}

// x * y / 255, rounded to nearest, for x, y in [0, 255]: Pillow's MULDIV255,
// so that CMYK conversions match Pillow's to the bit.
inline uint8_t mul_div_255(int x, int y) {
  const int product = x * y + 128;
  return static_cast<uint8_t>((product + (product >> 8)) >> 8);
}

// ITU-R BT.601 luma with libjpeg's (and Pillow's) 16-bit fixed-point weights.
inline uint8_t luma(int r, int g, int b) {
  return static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 32768) >> 16);
}

// CMYK as libjpeg outputs it (Adobe convention) to RGB or gray planes:
// R = C * K / 255 etc., exactly as Pillow converts CMYK to RGB.
inline void cmyk_row_to_planes(const JSAMPLE* src, int width, int out_channels, uint8_t* out,
                               size_t plane_size) {
  for (int i = 0; i < width; ++i) {
    const JSAMPLE* p = src + 4 * i;
    const uint8_t r = mul_div_255(p[0], p[3]);
    const uint8_t g = mul_div_255(p[1], p[3]);
    const uint8_t b = mul_div_255(p[2], p[3]);
    if (out_channels == 3) {
      out[i] = r;
      out[plane_size + i] = g;
      out[2 * plane_size + i] = b;
    } else {
      out[i] = luma(r, g, b);
    }
  }
}

// Splits `width` 4-byte pixels into the first `out_channels` planes.
inline void split_4_byte_pixels(const JSAMPLE* src, int width, int out_channels, uint8_t* out,
                                size_t plane_size) {
  uint8_t* __restrict p0 = out;
  uint8_t* __restrict p1 = out + plane_size;
  uint8_t* __restrict p2 = out + 2 * plane_size;
  if (out_channels == 4) {
    uint8_t* __restrict p3 = out + 3 * plane_size;
    for (int i = 0; i < width; ++i) {
      uint32_t v;
      std::memcpy(&v, src + 4 * i, 4);
      p0[i] = static_cast<uint8_t>(v);
      p1[i] = static_cast<uint8_t>(v >> 8);
      p2[i] = static_cast<uint8_t>(v >> 16);
      p3[i] = static_cast<uint8_t>(v >> 24);
    }
    return;
  }
  for (int i = 0; i < width; ++i) {
    uint32_t v;
    std::memcpy(&v, src + 4 * i, 4);
    p0[i] = static_cast<uint8_t>(v);
    p1[i] = static_cast<uint8_t>(v >> 8);
    p2[i] = static_cast<uint8_t>(v >> 16);
  }
}

// Writes one decoded row, `src` holding `width` pixels in `layout`, into row
// `row` of the `out_channels` CHW planes at `out`.
inline void emit_row(const JSAMPLE* src, RowLayout layout, int width, int out_channels,
                     uint8_t* out, size_t plane_size) {
  switch (layout) {
    case RowLayout::kGray:
      std::memcpy(out, src, static_cast<size_t>(width));
      return;
    case RowLayout::kRgbx:
      split_4_byte_pixels(src, width, /*out_channels=*/3, out, plane_size);
      return;
    case RowLayout::kCmyk:
      if (out_channels == 4) {
        split_4_byte_pixels(src, width, out_channels, out, plane_size);
      } else {
        cmyk_row_to_planes(src, width, out_channels, out, plane_size);
      }
      return;
  }
}

// The columns [x, x + width) that libjpeg must decode so that every column of
// `window` equals the same column of a full decode.
//
// With horizontal chroma subsampling, libjpeg's default ("fancy") upsampling
// computes each output column from its chroma sample and that sample's
// neighbour. jpeg_crop_scanline makes the decoded region's edges behave like
// image edges (the neighbour is replaced by a copy), so the region's first and
// last columns differ from a full decode. Widening the region by one column
// on each side that is not an image edge pushes those columns outside the
// window. The region must also keep at least two chroma samples per row, or
// jpeg_crop_scanline switches to plain replication for very narrow crops.
//
// Progressive files whose scans stop early (valid, or truncated and decoded
// with strict=False) get libjpeg's block smoothing, which estimates missing
// coefficients from a 5 x 5 neighbourhood of DC values. libjpeg-turbo starts
// that neighbourhood at the region's first block column, as if it were the
// image's left edge, so two more iMCU columns on the left are needed there.
struct Region {
  int64_t x = 0;
  int64_t width = 0;
};

struct RegionInputs {
  int64_t image_width;    // Of the image as decoded (at its DCT scale).
  int max_h_samp_factor;
  int64_t imcu_width;     // Pixels per iMCU column as decoded.
  bool progressive;
  bool exact_edges;
};

inline Region region_for(const RegionInputs& in, const Window& window) {
  int64_t left = window.x;
  int64_t right = window.x + window.width;
  if (in.exact_edges && in.max_h_samp_factor > 1) {
    left = left > 0 ? left - 1 : 0;
    right = right < in.image_width ? right + 1 : right;
    const int64_t min_width = 2 * static_cast<int64_t>(in.max_h_samp_factor) + 1;
    if (right - left < min_width) {
      right = left + min_width < in.image_width ? left + min_width : in.image_width;
      left = right - min_width > 0 ? right - min_width : 0;
    }
  }
  if (in.exact_edges && in.progressive) {
    left = std::max<int64_t>(0, left - 2 * in.imcu_width);
  }
  return Region{left, right - left};
}

// Phase 1: parse the markers up to the first scan. See Note [libjpeg error handling].
inline bool read_header_guarded(j_decompress_ptr cinfo, ErrorManager* err, const uint8_t* data,
                                size_t size) {
  if (setjmp(err->jump)) {
    return false;
  }
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  return true;
}

// Receives the window's rows as libjpeg produces them: `pixels` holds the
// window's columns of decoded row `row` (0 is the window's first) in the
// plan's RowLayout. Implementations must not throw.
class RowSink {
 public:
  virtual ~RowSink() = default;
  virtual void consume(int64_t row, const JSAMPLE* pixels) = 0;
};

// Writes rows into caller-owned CHW planes: the plain crop.
class PlanesSink : public RowSink {
 public:
  PlanesSink(RowLayout layout, int64_t width, int out_channels, size_t plane_size, uint8_t* out)
      : layout_(layout), width_(width), out_channels_(out_channels), plane_size_(plane_size),
        out_(out) {}
  void consume(int64_t row, const JSAMPLE* pixels) override {
    emit_row(pixels, layout_, static_cast<int>(width_), out_channels_, out_ + row * width_,
             plane_size_);
  }

 private:
  RowLayout layout_;
  int64_t width_;
  int out_channels_;
  size_t plane_size_;
  uint8_t* out_;
};

// Copies rows as libjpeg lays them out (4-byte pixels for RowLayout::kRgbx)
// into caller-owned memory, one row after the other: an HWC image.
class InterleavedSink : public RowSink {
 public:
  InterleavedSink(size_t row_bytes, uint8_t* out) : row_bytes_(row_bytes), out_(out) {}
  void consume(int64_t row, const JSAMPLE* pixels) override {
    std::memcpy(out_ + static_cast<size_t>(row) * row_bytes_, pixels, row_bytes_);
  }

 private:
  size_t row_bytes_;
  uint8_t* out_;
};

// Rows decoded before they are handed to the sink. Reading a row back right
// after libjpeg's SIMD colour conversion wrote it stalls on store-to-load
// forwarding (the split into planes took 11% of a crop's time, row by row);
// a batch of rows gives the stores time to retire.
constexpr int kRowsPerBatch = 16;

// The parameters of phase 2, computed before the jump point is armed.
struct RowPlan {
  Window window;  // In pixels of the image as decoded at scale_num / 8.
  Region region;
  RowLayout layout;
  int scale_num;
  RowSink* sink;
};

// Phase 2: start the decompressor, restrict it to the region's columns, skip
// the rows above the window and hand the window's rows to `plan->sink`.
// See Note [libjpeg error handling].
inline bool decode_rows_guarded(j_decompress_ptr cinfo, ErrorManager* err, const RowPlan* plan) {
  if (setjmp(err->jump)) {
    return false;
  }
  cinfo->out_color_space = libjpeg_output_space(plan->layout);
  cinfo->scale_num = static_cast<unsigned int>(plan->scale_num);
  cinfo->scale_denom = 8;
  // libjpeg's defaults, set explicitly because exactness depends on them.
  // (JDCT_IFAST and merged upsampling were measured for the resized path: at
  // most 15% faster, and 28 dB PSNR on photo-like images. Not worth it.)
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  jpeg_start_decompress(cinfo);

  JDIMENSION region_x = static_cast<JDIMENSION>(plan->region.x);
  JDIMENSION region_width = static_cast<JDIMENSION>(plan->region.width);
  if (region_width < cinfo->output_width) {
    // Moves region_x left to an iMCU boundary and widens region_width to match.
    jpeg_crop_scanline(cinfo, &region_x, &region_width);
  }
  const int src_channels = cinfo->output_components;
  JSAMPARRAY rows = (*cinfo->mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(cinfo), JPOOL_IMAGE,
                                                region_width * src_channels, kRowsPerBatch);
  const Window& window = plan->window;
  if (window.y > 0) {
    jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(window.y));
  }
  const size_t first_column = static_cast<size_t>(window.x - region_x) * src_channels;
  for (int64_t done = 0; done < window.height;) {
    const JDIMENSION wanted =
        static_cast<JDIMENSION>(std::min<int64_t>(kRowsPerBatch, window.height - done));
    JDIMENSION got = 0;
    while (got < wanted) {
      const JDIMENSION read = jpeg_read_scanlines(cinfo, rows + got, wanted - got);
      if (read == 0) {
        fail_with(reinterpret_cast<j_common_ptr>(cinfo),
                  "libjpeg returned no row (this is a bug in custom_op)");
      }
      got += read;
    }
    for (JDIMENSION i = 0; i < got; ++i) {
      plan->sink->consume(done + i, rows[i] + first_column);
    }
    done += got;
  }
  return true;
}

// libjpeg's size of a dimension decoded at scale_num / 8 (jdiv_round_up).
inline int64_t scaled_dimension(int64_t full, int scale_num) {
  return (full * scale_num + 7) / 8;
}

// The smallest window of the image decoded at scale_num / 8 that covers
// `window` (given in full-size pixels).
inline Window scaled_window(const Window& window, int scale_num, int64_t scaled_height,
                            int64_t scaled_width) {
  const int64_t top = window.y * scale_num / 8;
  const int64_t left = window.x * scale_num / 8;
  const int64_t bottom = std::min<int64_t>((window.y + window.height) * scale_num + 7, scaled_height * 8) / 8;
  const int64_t right = std::min<int64_t>((window.x + window.width) * scale_num + 7, scaled_width * 8) / 8;
  return Window{top, left, std::max<int64_t>(bottom - top, 1), std::max<int64_t>(right - left, 1)};
}

// Resizes the window while it is decoded: each row is resampled horizontally
// as it arrives, on libjpeg's interleaved pixels (1 or 4 bytes); finish()
// resamples the columns and only then splits the small result into planes
// (and converts CMYK, so CMYK files are resized before their conversion to
// RGB, a difference far below the resampling's own rounding).
// `box` is the requested window in the decoded window's pixels (fractional
// at reduced scales), so the output is aligned to the request exactly.
class ResizeSink : public RowSink {
 public:
  ResizeSink(RowLayout layout, int out_channels, const Window& decoded, double box_y, double box_x,
             double box_height, double box_width, int out_height, int out_width, bool antialias)
      : layout_(layout), pixel_bytes_(layout == RowLayout::kGray ? 1 : 4),
        out_channels_(out_channels), out_height_(out_height),
        out_width_(out_width),
        taps_x_(resample_taps(box_x, box_width, static_cast<int>(decoded.width), out_width, antialias)),
        taps_y_(resample_taps(box_y, box_height, static_cast<int>(decoded.height), out_height, antialias)),
        row_floats_(static_cast<size_t>(decoded.width) * pixel_bytes_),
        rows_(static_cast<size_t>(decoded.height) * out_width * pixel_bytes_) {}

  void consume(int64_t row, const JSAMPLE* pixels) override {
    bytes_to_floats(pixels, row_floats_.size(), row_floats_.data());
    float* dst = rows_.data() + static_cast<size_t>(row) * out_width_ * pixel_bytes_;
    if (pixel_bytes_ == 1) {
      resample_row<1>(row_floats_.data(), taps_x_, dst);
    } else {
      resample_row<4>(row_floats_.data(), taps_x_, dst);
    }
  }

  // Writes the CHW output; call after every row was consumed.
  void finish(uint8_t* out) {
    const int row_floats = out_width_ * pixel_bytes_;
    std::vector<uint8_t> interleaved(static_cast<size_t>(out_height_) * row_floats);
    std::vector<float> scratch;
    resample_columns(rows_.data(), row_floats, taps_y_, interleaved.data(), &scratch);
    const size_t plane_size = static_cast<size_t>(out_height_) * out_width_;
    for (int r = 0; r < out_height_; ++r) {
      emit_row(interleaved.data() + static_cast<size_t>(r) * row_floats, layout_, out_width_,
               out_channels_, out + static_cast<size_t>(r) * out_width_, plane_size);
    }
  }

 private:
  RowLayout layout_;
  int pixel_bytes_;
  int out_channels_;
  int out_height_;
  int out_width_;
  ResampleTaps taps_x_;
  ResampleTaps taps_y_;
  std::vector<float> row_floats_;
  std::vector<float> rows_;
};

}  // namespace detail

// The number of channels a mode yields for an image.
inline int output_channels(const JpegInfo& info, ColorMode mode) {
  switch (mode) {
    case ColorMode::kRgb:
      return 3;
    case ColorMode::kGray:
      return 1;
    case ColorMode::kUnchanged:
      return info.channels;
  }
  return 0;
}

// Owns one libjpeg decompressor for one encoded image: read_header(), then at
// most one decode(). The destructor destroys the decompressor exactly once,
// whichever phase failed. `data` must outlive the decoder.
class JpegDecoder {
 public:
  JpegDecoder(const uint8_t* data, size_t size, const DecodeOptions& options)
      : data_(data), size_(size), options_(options) {
    std::memset(&cinfo_, 0, sizeof(cinfo_));
    cinfo_.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = detail::error_exit_cb;
    err_.pub.emit_message = detail::emit_message_cb;
    err_.strict = options.strict;
    progress_.pub.progress_monitor = detail::progress_monitor_cb;
    progress_.max_scans = options.limits.max_scans;
    created_ = create_guarded(&cinfo_, &err_);
    if (created_) {
      cinfo_.progress = &progress_.pub;
    }
  }

  ~JpegDecoder() {
    // Safe on a half-created object: it frees only what libjpeg allocated.
    jpeg_destroy_decompress(&cinfo_);
  }

  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Parses the header and checks it against the limits.
  Status read_header(JpegInfo* info) {
    if (!created_) {
      return decode_error();
    }
    if (!detail::read_header_guarded(&cinfo_, &err_, data_, size_)) {
      return decode_error();
    }
    if (cinfo_.data_precision != 8) {
      return decode_error("unsupported data precision " + std::to_string(cinfo_.data_precision) +
                          " (only 8-bit JPEG files are supported)");
    }
    const int channels = detail::stored_channels(cinfo_.jpeg_color_space);
    if (channels == 0 || channels != cinfo_.num_components) {
      return decode_error("unsupported colour space " + std::to_string(cinfo_.jpeg_color_space) +
                          " with " + std::to_string(cinfo_.num_components) + " components");
    }
    const int64_t pixels = static_cast<int64_t>(cinfo_.image_width) * cinfo_.image_height;
    if (pixels > options_.limits.max_pixels) {
      return decode_error("the image is " + std::to_string(cinfo_.image_height) + " x " +
                          std::to_string(cinfo_.image_width) + " (height x width) = " +
                          std::to_string(pixels) + " pixels, more than max_pixels=" +
                          std::to_string(options_.limits.max_pixels));
    }
    info_.height = static_cast<int>(cinfo_.image_height);
    info_.width = static_cast<int>(cinfo_.image_width);
    info_.channels = channels;
    info_.color_space = cinfo_.jpeg_color_space;
    info_.progressive = cinfo_.progressive_mode != 0;
    detail::max_sampling_factors(cinfo_.comp_info, cinfo_.num_components, &info_.max_h_samp_factor,
                                 &info_.max_v_samp_factor);
    header_read_ = true;
    *info = info_;
    return Status{};
  }

  // Decodes `window` into `out`, which holds output_channels(info, mode)
  // planes of window.height x window.width bytes (CHW, contiguous). Bit-exact:
  // equal to the same window of a full decode.
  Status decode(const Window& window, ColorMode mode, uint8_t* out) {
    const detail::RowLayout layout = detail::row_layout(info_.color_space, mode);
    detail::PlanesSink sink(layout, window.width, output_channels(info_, mode),
                            static_cast<size_t>(window.height * window.width), out);
    return decode_full_scale(window, layout, &sink);
  }

  // Whether decode_rgbx() serves `mode`: colour (YCbCr or RGB) files decoded
  // to RGB. Gray and CMYK files are not: libjpeg cannot emit them as RGBX.
  bool has_rgbx_rows(ColorMode mode) const {
    return header_read_ && detail::row_layout(info_.color_space, mode) == detail::RowLayout::kRgbx;
  }

  // Decodes `window` into `out` as window.height rows of window.width 4-byte
  // pixels (HWC): R, G, B, as decode() would put them in planes, and a fourth
  // byte of 255. Needs has_rgbx_rows(mode).
  Status decode_rgbx(const Window& window, ColorMode mode, uint8_t* out) {
    if (!has_rgbx_rows(mode)) {
      return Status{StatusCode::kInvalidArgument,
                    "decode_rgbx needs a colour file and an RGB mode (this is a bug in custom_op)"};
    }
    detail::InterleavedSink sink(static_cast<size_t>(window.width) * 4, out);
    return decode_full_scale(window, detail::RowLayout::kRgbx, &sink);
  }

  // Decodes `window` (in full-size pixels) at libjpeg's scale scale_num / 8
  // (1..8), which skips most of the inverse DCT work, and resizes it to
  // out_height x out_width with the triangle filter (antialiased when
  // shrinking) into `out` (CHW, output_channels(info, mode) planes).
  Status decode_resized(const Window& window, ColorMode mode, int scale_num, int out_height,
                        int out_width, bool antialias, uint8_t* out) {
    if (scale_num < 1 || scale_num > 8 || out_height < 1 || out_width < 1) {
      return Status{StatusCode::kInvalidArgument,
                    "scale_num must be 1..8 and the output size positive (this is a bug in custom_op)"};
    }
    Status ready = begin_decode(window);
    if (!ready.ok()) {
      return ready;
    }
    const Window decoded = detail::scaled_window(window, scale_num,
                                                 detail::scaled_dimension(info_.height, scale_num),
                                                 detail::scaled_dimension(info_.width, scale_num));
    const bool cut_done = decode_from_restarts(
        window, decoded, scale_num, [&](JpegDecoder& cut, const Window& in_cut) {
          return cut.decode_resized(in_cut, mode, scale_num, out_height, out_width, antialias, out);
        });
    if (cut_done) {
      return Status{};
    }
    const double scale = scale_num / 8.0;
    const detail::RowLayout layout = detail::row_layout(info_.color_space, mode);
    detail::ResizeSink sink(layout, output_channels(info_, mode), decoded,
                            window.y * scale - decoded.y, window.x * scale - decoded.x,
                            window.height * scale, window.width * scale, out_height, out_width,
                            antialias);
    detail::RowPlan plan{decoded, detail::region_for(region_inputs(scale_num), decoded), layout,
                         scale_num, &sink};
    if (!detail::decode_rows_guarded(&cinfo_, &err_, &plan)) {
      return decode_error();
    }
    sink.finish(out);
    return Status{};
  }

  // Checks that `window` is non-empty and lies inside the image.
  Status check_window(const Window& w) const {
    const bool inside = w.y >= 0 && w.x >= 0 && w.height >= 1 && w.width >= 1 &&
                        w.y + w.height <= info_.height && w.x + w.width <= info_.width;
    if (inside) {
      return Status{};
    }
    return Status{StatusCode::kInvalidArgument,
                  "crop window (crop_y=" + std::to_string(w.y) + ", crop_x=" + std::to_string(w.x) +
                      ", crop_height=" + std::to_string(w.height) +
                      ", crop_width=" + std::to_string(w.width) + ") does not fit in the " +
                      std::to_string(info_.height) + " x " + std::to_string(info_.width) +
                      " (height x width) image"};
  }

  // The restart-segment grid decode() seeks with, or false when the file
  // offers none: it needs restart markers, one baseline Huffman scan holding
  // every component, and an interval that divides the MCUs per row. (The
  // markers themselves are checked only while seeking.) Call after read_header.
  bool restart_geometry(restarts::ScanGeometry* g) const {
    if (!header_read_ || cinfo_.progressive_mode || cinfo_.arith_code ||
        cinfo_.restart_interval == 0 || cinfo_.comps_in_scan != cinfo_.num_components) {
      return false;
    }
    if (cinfo_.num_components == 1 && (info_.max_h_samp_factor != 1 || info_.max_v_samp_factor != 1)) {
      return false;  // Rare; cutting its iMCU rows of several block rows is not tested.
    }
    *g = restarts::mcu_grid(info_.width, info_.height, cinfo_.num_components,
                            info_.max_h_samp_factor, info_.max_v_samp_factor);
    g->interval = cinfo_.restart_interval;
    if (g->mcus_per_row % g->interval != 0) {
      return false;
    }
    g->segments_per_row = g->mcus_per_row / g->interval;
    return true;
  }

 private:
  // Decodes through a cut-out of the restart segments that cover `decoded`
  // (the window in pixels decoded at scale_num / 8): builds the cut-out JPEG,
  // then calls decode_cut(cut_decoder, window moved into the cut-out). Returns
  // false, having written nothing that the ordinary decode will not
  // overwrite, whenever the file does not allow it or anything in the
  // cut-out looks wrong: the cut-out is decoded strictly, so a damaged
  // segment or marker sends the caller down the ordinary path.
  template <typename DecodeCut>
  bool decode_from_restarts(const Window& window, const Window& decoded, int scale_num,
                            const DecodeCut& decode_cut) {
    restarts::ScanGeometry geometry;
    restarts::Cut cut;
    restarts::HeaderLayout layout;
    if (!options_.seek || !restart_geometry(&geometry) ||
        !restarts::plan_cut(geometry, scale_num, decoded.y, decoded.x, decoded.y + decoded.height,
                            decoded.x + decoded.width, &cut) ||
        !restarts::parse_header_layout(data_, size_, &layout) ||
        layout.scan_data_offset != size_ - cinfo_.src->bytes_in_buffer) {
      return false;
    }
    std::vector<restarts::ByteRange> segments;
    if (!restarts::find_cut_segments(data_, size_, layout.scan_data_offset, geometry, cut,
                                     &segments)) {
      return false;
    }
    std::vector<uint8_t> bytes;
    restarts::write_cut_jpeg(data_, layout, geometry, cut, segments, &bytes);
    DecodeOptions cut_options = options_;
    cut_options.strict = true;
    cut_options.seek = false;
    JpegDecoder cut_decoder(bytes.data(), bytes.size(), cut_options);
    JpegInfo cut_info;
    if (!cut_decoder.read_header(&cut_info).ok() || cut_info.channels != info_.channels ||
        cut_info.color_space != info_.color_space) {
      return false;
    }
    const Window in_cut{window.y - cut.top(geometry), window.x - cut.left(geometry), window.height,
                        window.width};
    return decode_cut(cut_decoder, in_cut).ok();
  }

  // What region_for needs about the image as decoded at scale_num / 8, where
  // an iMCU column is max_h_samp_factor blocks of scale_num pixels.
  detail::RegionInputs region_inputs(int scale_num) const {
    return detail::RegionInputs{detail::scaled_dimension(info_.width, scale_num),
                                info_.max_h_samp_factor, scale_num * info_.max_h_samp_factor,
                                info_.progressive, options_.exact_edges};
  }

  // Decodes `window` at full scale, handing its rows in `layout` to `sink`:
  // from the restart segments that cover it when the file allows, else
  // through libjpeg's crop and skip.
  Status decode_full_scale(const Window& window, detail::RowLayout layout, detail::RowSink* sink) {
    Status ready = begin_decode(window);
    if (!ready.ok()) {
      return ready;
    }
    const bool cut_done = decode_from_restarts(
        window, window, /*scale_num=*/8, [&](JpegDecoder& cut, const Window& in_cut) {
          return cut.decode_full_scale(in_cut, layout, sink);
        });
    if (cut_done) {
      return Status{};
    }
    detail::RowPlan plan{window, detail::region_for(region_inputs(/*scale_num=*/8), window), layout,
                         /*scale_num=*/8, sink};
    if (!detail::decode_rows_guarded(&cinfo_, &err_, &plan)) {
      return decode_error();
    }
    return Status{};
  }

  // Checks the state and the window before the one decode this object allows.
  Status begin_decode(const Window& window) {
    if (!header_read_ || decoded_) {
      return Status{StatusCode::kInvalidArgument,
                    "decode needs one successful read_header() first (this is a bug in custom_op)"};
    }
    decoded_ = true;
    return check_window(window);
  }

  // jpeg_create_decompress can itself fail (out of memory, a library/header
  // version mismatch), so it runs under a jump point as well.
  static bool create_guarded(j_decompress_ptr cinfo, detail::ErrorManager* err) {
    if (setjmp(err->jump)) {
      return false;
    }
    jpeg_create_decompress(cinfo);
    return true;
  }

  Status decode_error(const std::string& message) const {
    return Status{StatusCode::kDecodeError, message};
  }
  Status decode_error() const { return decode_error(err_.message); }

  jpeg_decompress_struct cinfo_;
  detail::ErrorManager err_;
  detail::ProgressMonitor progress_;
  const uint8_t* data_;
  size_t size_;
  DecodeOptions options_;
  JpegInfo info_;
  bool created_ = false;
  bool header_read_ = false;
  bool decoded_ = false;
};

// Convenience for callers without a binding (tests, the fuzzer): header, then
// window, with every failure reported as a Status.
inline Status decode_window(const uint8_t* data, size_t size, const Window& window, ColorMode mode,
                            const DecodeOptions& options, uint8_t* out, size_t out_size) {
  JpegDecoder decoder(data, size, options);
  JpegInfo info;
  Status status = decoder.read_header(&info);
  if (!status.ok()) {
    return status;
  }
  const size_t needed = static_cast<size_t>(output_channels(info, mode)) *
                        static_cast<size_t>(window.height > 0 ? window.height : 0) *
                        static_cast<size_t>(window.width > 0 ? window.width : 0);
  if (out_size < needed) {
    return Status{StatusCode::kInvalidArgument, "output buffer too small"};
  }
  return decoder.decode(window, mode, out);
}

}  // namespace custom_op
