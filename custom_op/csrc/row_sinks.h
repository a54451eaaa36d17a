// Row sinks: where the window's rows go as libjpeg produces them. The plain
// crop writes them into the output, HWC or CHW (OutputSink, which also
// serves the resized path's ATen route with libjpeg's RGBX rows as they
// are), and the reduced DCT scales resample each row as it arrives
// (ResizeSink).
//
// A sink sees one row of the window at a time, already restricted to the
// window's columns, in the RowLayout the decoder chose. It must not call
// libjpeg, throw, or allocate after construction: consume() runs while a
// libjpeg jump point is armed (Note [libjpeg error handling]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "pixel_formats.h"
#include "region.h"
#include "resample.h"

namespace custom_op {
namespace detail {

// Receives the window's rows as libjpeg produces them: `pixels` holds the
// window's columns of decoded row `row` (0 is the window's first) in the
// plan's RowLayout. Implementations must not throw.
class RowSink {
 public:
  virtual ~RowSink() = default;
  virtual void consume(int64_t row, const JSAMPLE* pixels) = 0;
  // Where libjpeg may write decoded row `row` itself, when the sink's format
  // is libjpeg's own, or nullptr. The decoder uses it only when the decoded
  // region is exactly the window, so that no column needs cutting off.
  virtual uint8_t* row_destination(int64_t /*row*/) { return nullptr; }
};

// Writes rows into caller-owned memory of `width` pixels per row, as
// out_channels channels in `order`: the plain crop.
class OutputSink : public RowSink {
 public:
  OutputSink(RowLayout layout, int64_t width, int out_channels, PixelOrder order, size_t plane_size,
             uint8_t* out)
      : layout_(layout), width_(width), out_channels_(out_channels), order_(order),
        plane_size_(plane_size), out_(out),
        row_step_(order == PixelOrder::kPlanar ? static_cast<size_t>(width)
                                               : static_cast<size_t>(width) * out_channels),
        direct_(rows_are_output(layout, out_channels, order)) {}
  void consume(int64_t row, const JSAMPLE* pixels) override {
    emit_row(pixels, layout_, static_cast<int>(width_), out_channels_, order_,
             out_ + static_cast<size_t>(row) * row_step_, plane_size_);
  }
  uint8_t* row_destination(int64_t row) override {
    return direct_ ? out_ + static_cast<size_t>(row) * row_step_ : nullptr;
  }

 private:
  RowLayout layout_;
  int64_t width_;
  int out_channels_;
  PixelOrder order_;
  size_t plane_size_;
  uint8_t* out_;
  size_t row_step_;
  bool direct_;
};

// Resizes the window while it is decoded: rows are resampled horizontally
// as they arrive, on libjpeg's interleaved pixels (1 or 4 bytes: `layout` is
// kGray, kRgbx or kCmyk), into uint8 rows of the output's width; finish()
// resamples the columns and only then writes the small result in the
// output's order (and converts CMYK, so CMYK files are resized before their
// conversion to RGB, a difference far below the resampling's own rounding).
// `box` is the requested window in the decoded window's pixels (fractional
// at reduced scales), so the output is aligned to the request exactly.
class ResizeSink : public RowSink {
 public:
  // Rows go through the width pass in groups of four, the rows the AVX2 pass
  // takes at once (SSE2 takes two): each tap's weights are set up once for
  // the group (fixed_point_passes.h).
  static constexpr int kRowsPerGroup = 4;

  ResizeSink(RowLayout layout, int out_channels, const Window& decoded, double box_y, double box_x,
             double box_height, double box_width, int out_height, int out_width, bool antialias)
      : layout_(layout), pixel_bytes_(bytes_per_pixel(layout)), out_channels_(out_channels),
        out_height_(out_height), out_width_(out_width), in_rows_(decoded.height),
        in_row_bytes_(static_cast<size_t>(decoded.width) * pixel_bytes_),
        out_row_bytes_(static_cast<size_t>(out_width) * pixel_bytes_),
        taps_x_(box_taps(box_x, box_width, decoded.width, out_width, antialias)),
        taps_y_(box_taps(box_y, box_height, decoded.height, out_height, antialias)),
        group_(kRowsPerGroup * in_row_bytes_),
        rows_(static_cast<size_t>(decoded.height) * out_row_bytes_) {}

  // A row waits in group_ until its group is full, or it is the last row.
  void consume(int64_t row, const JSAMPLE* pixels) override {
    const int64_t in_group = row % kRowsPerGroup;
    std::memcpy(group_.data() + static_cast<size_t>(in_group) * in_row_bytes_, pixels, in_row_bytes_);
    if (in_group == kRowsPerGroup - 1 || row + 1 == in_rows_) {
      const int64_t first = row - in_group;
      resample_rows_fixed(group_.data(), in_row_bytes_, in_group + 1, pixel_bytes_, taps_x_,
                          rows_.data() + static_cast<size_t>(first) * out_row_bytes_, out_row_bytes_);
    }
  }

  // Writes the output in `order`; call after every row was consumed.
  void finish(PixelOrder order, uint8_t* out) {
    std::vector<uint8_t> interleaved(static_cast<size_t>(out_height_) * out_row_bytes_);
    resample_columns_fixed(rows_.data(), out_row_bytes_, taps_y_, interleaved.data());
    OutputSink sink(layout_, out_width_, out_channels_, order,
                    static_cast<size_t>(out_height_) * out_width_, out);
    for (int r = 0; r < out_height_; ++r) {
      sink.consume(r, interleaved.data() + static_cast<size_t>(r) * out_row_bytes_);
    }
  }

 private:
  RowLayout layout_;
  int pixel_bytes_;
  int out_channels_;
  int out_height_;
  int out_width_;
  int64_t in_rows_;
  size_t in_row_bytes_;
  size_t out_row_bytes_;
  GridTaps taps_x_;
  GridTaps taps_y_;
  std::vector<uint8_t> group_;
  std::vector<uint8_t> rows_;
};

}  // namespace detail
}  // namespace custom_op
