// The decoder: reads a JPEG header and decodes one window of the image into
// caller-owned memory with libjpeg-turbo, through libjpeg's crop and skip or,
// when the file has usable restart markers or the caller hands an MCU-row
// index, through a cut-out of the data that covers the window
// (restart_seek.h, index_seek.h).
//
// It owns libjpeg's decompressor, the order of its phases, and the choice
// between the two paths. Everything else is delegated, in this include
// order: jpeg_errors.h (the setjmp discipline), limits.h, region.h (which
// columns and rows), pixel_formats.h and row_sinks.h (what happens to a
// decoded row), jpeg_phases.h (libjpeg's calls under a jump point). It sees
// only libjpeg and raw memory, so a plain C++ test or a fuzzer can drive it
// without Python or torch; the stable-ABI binding lives in
// decode_and_crop_jpeg.cpp and binding/.
#pragma once

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "index_scan.h"
#include "index_seek.h"
#include "index_stats.h"
#include "jpeg_errors.h"
#include "jpeg_phases.h"
#include "limits.h"
#include "pixel_formats.h"
#include "region.h"
#include "restart_seek.h"
#include "row_sinks.h"

namespace custom_op {

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
  // Narrow libjpeg's decode to the region's columns (jpeg_crop_scanline).
  // Only tests turn it off, for a reference that decodes every column.
  bool crop_columns = true;
  // A serialized MCU-row index of this file (mcu_index.h), or nullptr. The
  // decoder checks it against the file and falls back on any mismatch; the
  // memory must outlive the decode.
  const uint8_t* index = nullptr;
  size_t index_size = 0;
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
    detail::install_error_manager(reinterpret_cast<j_common_ptr>(&cinfo_), &err_, options.strict);
    created_ = create_guarded(&cinfo_, &err_);
    if (created_) {
      apply_limits(options.limits, &progress_, &cinfo_);
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
    Status within_limits = check_pixels(cinfo_, options_.limits);
    if (!within_limits.ok()) {
      return within_limits;
    }
    memory_ = 0;
    within_limits = reserve_memory(decode_memory_bytes(cinfo_));
    if (!within_limits.ok()) {
      return within_limits;
    }
    info_.height = static_cast<int>(cinfo_.image_height);
    info_.width = static_cast<int>(cinfo_.image_width);
    info_.channels = channels;
    info_.color_space = cinfo_.jpeg_color_space;
    info_.progressive = cinfo_.progressive_mode != 0;
    restarts::max_sampling_factors(cinfo_.comp_info, cinfo_.num_components, &info_.max_h_samp_factor,
                                 &info_.max_v_samp_factor);
    header_read_ = true;
    *info = info_;
    return Status{};
  }

  // Decodes `window` into `out`, which holds output_channels(info, mode)
  // channels of window.height x window.width bytes in `order` (HWC or CHW,
  // contiguous). Bit-exact: equal to the same window of a full decode.
  Status decode(const Window& window, ColorMode mode, uint8_t* out,
                PixelOrder order = PixelOrder::kPlanar) {
    const detail::RowLayout layout = detail::row_layout(info_.color_space, mode, order);
    // Unsigned: the window is not checked yet (decode_full_scale does), and
    // the sink is never used when it does not fit.
    detail::OutputSink sink(layout, window.width, output_channels(info_, mode), order,
                            static_cast<size_t>(window.height) * static_cast<size_t>(window.width), out);
    return decode_full_scale(window, layout, &sink);
  }

  // Whether decode_rgbx() serves `mode`: colour (YCbCr or RGB) files decoded
  // to RGB. Gray and CMYK files are not: libjpeg cannot emit them as RGBX.
  bool has_rgbx_rows(ColorMode mode) const {
    return header_read_ &&
           detail::row_layout(info_.color_space, mode, PixelOrder::kPlanar) == detail::RowLayout::kRgbx;
  }

  // Decodes `window` into `out` as window.height rows of window.width 4-byte
  // pixels (HWC): R, G, B, as decode() would output them, and a fourth byte
  // of 255. Needs has_rgbx_rows(mode).
  Status decode_rgbx(const Window& window, ColorMode mode, uint8_t* out) {
    if (!has_rgbx_rows(mode)) {
      return Status{StatusCode::kInvalidArgument,
                    "decode_rgbx needs a colour file and an RGB mode (this is a bug in custom_op)"};
    }
    detail::OutputSink sink(detail::RowLayout::kRgbx, window.width, /*out_channels=*/4,
                            PixelOrder::kInterleaved, /*plane_size=*/0, out);
    return decode_full_scale(window, detail::RowLayout::kRgbx, &sink);
  }

  // Decodes `window` (in full-size pixels) at libjpeg's scale scale_num / 8
  // (1..8), which skips most of the inverse DCT work, and resizes it to
  // out_height x out_width with the triangle filter (antialiased when
  // shrinking) into `out` (output_channels(info, mode) channels in `order`).
  // With `box`, the output covers that box instead of the whole window: the
  // window then holds the box and the filter's reach around it, so that a
  // rectangle of a whole image's resize comes out as from the whole image.
  Status decode_resized(const Window& window, ColorMode mode, int scale_num, int out_height,
                        int out_width, bool antialias, uint8_t* out,
                        PixelOrder order = PixelOrder::kPlanar, const BoxInWindow* box = nullptr) {
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
    const auto decode_cut = [&](JpegDecoder& cut, const Window& in_cut) {
      return cut.decode_resized(in_cut, mode, scale_num, out_height, out_width, antialias, out,
                                order, box);
    };
    if (decode_from_restarts(window, decoded, scale_num, decode_cut) ||
        decode_from_index(window, decoded, scale_num, decode_cut)) {
      return Status{};
    }
    const double scale = scale_num / 8.0;
    // The resampler works on 1- or 4-byte pixels; finish() writes `order`.
    const detail::RowLayout layout = detail::row_layout(info_.color_space, mode, PixelOrder::kPlanar);
    const int64_t pixel_bytes = detail::bytes_per_pixel(layout);
    // ResizeSink's buffers: a group of input rows, the width pass's rows and
    // the result.
    Status within_limits = reserve_memory(
        pixel_bytes * (detail::ResizeSink::kRowsPerGroup * decoded.width +
                       decoded.height * out_width + static_cast<int64_t>(out_height) * out_width));
    if (!within_limits.ok()) {
      return within_limits;
    }
    const BoxInWindow whole{0.0, 0.0, static_cast<double>(window.height),
                            static_cast<double>(window.width)};
    const BoxInWindow& target = box == nullptr ? whole : *box;
    detail::ResizeSink sink(layout, output_channels(info_, mode), decoded,
                            (window.y + target.y) * scale - decoded.y,
                            (window.x + target.x) * scale - decoded.x, target.height * scale,
                            target.width * scale, out_height, out_width, antialias);
    const detail::RowPlan plan = row_plan(decoded, layout, scale_num, &sink);
    if (!detail::decode_rows_guarded(&cinfo_, &err_, &plan)) {
      return decode_error();
    }
    sink.finish(order, out);
    return Status{};
  }

  // Counts `bytes` more of working memory (a buffer about to be allocated for
  // this decode) against max_memory. read_header counts libjpeg's.
  Status reserve_memory(int64_t bytes) {
    memory_ += bytes;
    return check_memory(memory_, options_.limits, decode_memory_reason(cinfo_));
  }

  // Checks that `window` is non-empty and lies inside the image.
  Status check_window(const Window& w) const {
    if (window_fits(w, info_.height, info_.width)) {
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

  // Serializes this file's MCU index (an entry every `mcus_per_entry` MCUs
  // of each row; 0 for the spacing of index_builder.h's budget) into `out`,
  // or returns false when the file cannot be indexed (see index_scan.h and
  // index_builder.h). Call after read_header.
  bool build_index(int64_t mcus_per_entry, std::vector<uint8_t>* out) const {
    mcu_index::ScanLayout scan;
    restarts::HeaderLayout layout;
    mcu_index::Index index;
    if (!index_scan(&scan, &layout)) {
      return false;
    }
    if (mcus_per_entry == 0 ? !mcu_index::build_within_budget(data_, size_, scan, &index)
                            : !mcu_index::build(data_, size_, scan, mcus_per_entry, &index)) {
      return false;
    }
    *out = mcu_index::serialize(index);
    return true;
  }

 private:
  // What the index needs of this file (index_scan.h) and where its header's
  // segments are, or false when the file cannot be indexed.
  bool index_scan(mcu_index::ScanLayout* scan, restarts::HeaderLayout* layout) const {
    return header_read_ && restarts::parse_header_layout(data_, size_, layout) &&
           layout->scan_data_offset == size_ - cinfo_.src->bytes_in_buffer &&
           mcu_index::scan_layout(cinfo_, layout->scan_data_offset, scan);
  }

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
    const Window in_cut{window.y - cut.top(geometry), window.x - cut.left(geometry), window.height,
                        window.width};
    return decode_cut_out(bytes, in_cut, decode_cut);
  }

  // Decodes through a cut-out made from options_.index (index_seek.h), with
  // the same contract as decode_from_restarts. Counts every outcome
  // (index_stats.h) when an index was handed over.
  template <typename DecodeCut>
  bool decode_from_index(const Window& window, const Window& decoded, int scale_num,
                         const DecodeCut& decode_cut) {
    if (options_.index == nullptr) {
      return false;
    }
    mcu_index::ScanLayout scan;
    restarts::HeaderLayout layout;
    if (!index_scan(&scan, &layout)) {
      count_index_outcome(IndexOutcome::kNotIndexable);
      return false;
    }
    std::vector<uint8_t> bytes;
    int64_t cut_top = 0;
    int64_t cut_left = 0;
    IndexOutcome outcome = mcu_index::make_index_cut(
        data_, size_, layout, scan, options_.index, options_.index_size, scale_num, decoded.y,
        decoded.x, decoded.y + decoded.height, decoded.x + decoded.width, &bytes, &cut_top,
        &cut_left);
    if (outcome == IndexOutcome::kIndexed &&
        !decode_cut_out(bytes,
                        Window{window.y - cut_top, window.x - cut_left, window.height, window.width},
                        decode_cut)) {
      outcome = IndexOutcome::kCutDecodeFailed;
    }
    count_index_outcome(outcome);
    return outcome == IndexOutcome::kIndexed;
  }

  // Reads the header of a cut-out and decodes `in_cut` from it strictly,
  // without seeking again. False on any failure (the caller falls back).
  template <typename DecodeCut>
  bool decode_cut_out(const std::vector<uint8_t>& bytes, const Window& in_cut,
                      const DecodeCut& decode_cut) const {
    DecodeOptions cut_options = options_;
    cut_options.strict = true;
    cut_options.seek = false;
    cut_options.index = nullptr;
    cut_options.index_size = 0;
    JpegDecoder cut_decoder(bytes.data(), bytes.size(), cut_options);
    JpegInfo cut_info;
    if (!cut_decoder.read_header(&cut_info).ok() || cut_info.channels != info_.channels ||
        cut_info.color_space != info_.color_space) {
      return false;
    }
    return decode_cut(cut_decoder, in_cut).ok();
  }

  // What region_for needs about the image as decoded at scale_num / 8, where
  // an iMCU column is max_h_samp_factor blocks of scale_num pixels.
  detail::RegionInputs region_inputs(int scale_num) const {
    return detail::RegionInputs{detail::scaled_dimension(info_.width, scale_num),
                                info_.max_h_samp_factor, scale_num * info_.max_h_samp_factor,
                                info_.progressive, options_.exact_edges};
  }

  // The plan of a decode of `decoded` (in pixels at scale_num / 8). Asks the
  // crop probe here, outside any jump point (it arms its own).
  detail::RowPlan row_plan(const Window& decoded, detail::RowLayout layout, int scale_num,
                           detail::RowSink* sink) const {
    detail::RowPlan plan{decoded, detail::region_for(region_inputs(scale_num), decoded), layout,
                         scale_num, sink};
    plan.crop_columns = options_.crop_columns;
    plan.crop_width_faulty = scale_num < 8 && libjpeg_crop_width_fault();
    return plan;
  }

  // Decodes `window` at full scale, handing its rows in `layout` to `sink`:
  // from the restart segments that cover it when the file allows, else
  // through libjpeg's crop and skip.
  Status decode_full_scale(const Window& window, detail::RowLayout layout, detail::RowSink* sink) {
    Status ready = begin_decode(window);
    if (!ready.ok()) {
      return ready;
    }
    const auto decode_cut = [&](JpegDecoder& cut, const Window& in_cut) {
      return cut.decode_full_scale(in_cut, layout, sink);
    };
    if (decode_from_restarts(window, window, /*scale_num=*/8, decode_cut) ||
        decode_from_index(window, window, /*scale_num=*/8, decode_cut)) {
      return Status{};
    }
    const detail::RowPlan plan = row_plan(window, layout, /*scale_num=*/8, sink);
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
  Status decode_error() const { return status_of(err_, options_.limits); }

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
  int64_t memory_ = 0;  // Working memory counted so far (reserve_memory).
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
  status = decoder.check_window(window);
  if (!status.ok()) {
    return status;
  }
  const size_t needed = static_cast<size_t>(output_channels(info, mode)) *
                        static_cast<size_t>(window.height) * static_cast<size_t>(window.width);
  if (out_size < needed) {
    return Status{StatusCode::kInvalidArgument, "output buffer too small"};
  }
  return decoder.decode(window, mode, out);
}

}  // namespace custom_op
