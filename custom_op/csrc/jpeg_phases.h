// The phases of a decode that call libjpeg under a jump point: reading the
// header, and starting the decompressor, restricting it to the region's
// columns, skipping the rows above the window and handing the window's rows
// to a RowSink.
//
// These are the only functions of the decoder that call setjmp; each follows
// Note [libjpeg error handling] (jpeg_errors.h): no object with a destructor,
// no local read after a jump, every allocation from libjpeg's pools. They
// decide nothing: JpegDecoder (jpeg_decoder.h) plans the region and the rows
// before it calls them.
#pragma once

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdint>

#include "crop_quirk.h"
#include "jpeg_errors.h"
#include "pixel_formats.h"
#include "region.h"
#include "row_sinks.h"

namespace custom_op {
namespace detail {

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
  // Whether jpeg_crop_scanline may narrow the decode to the region. False
  // decodes every column (at the plan's scale) and cuts the window out of
  // each row: slower, never wrong.
  bool crop_columns = true;
  // libjpeg_crop_width_fault(), asked before the jump point is armed.
  bool crop_width_faulty = false;
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
  // A faulty jpeg_crop_scanline leaves part of some rows unwritten at this
  // scale (crop_quirk.h): then every column is decoded instead.
  const bool crop = plan->crop_columns && region_width < cinfo->output_width &&
                    !(plan->crop_width_faulty && crop_width_fault_applies(*cinfo));
  if (crop) {
    // Moves region_x left to an iMCU boundary and widens region_width to match.
    jpeg_crop_scanline(cinfo, &region_x, &region_width);
  } else {
    region_x = 0;
    region_width = cinfo->output_width;
  }
  const int src_channels = cinfo->output_components;
  JSAMPARRAY rows = (*cinfo->mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(cinfo), JPOOL_IMAGE,
                                                region_width * src_channels, kRowsPerBatch);
  const Window& window = plan->window;
  if (window.y > 0) {
    jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(window.y));
  }
  const size_t first_column = static_cast<size_t>(window.x - region_x) * src_channels;
  // When the region is the window and the sink takes libjpeg's format,
  // libjpeg writes into the output itself: no copy at all.
  const bool direct = first_column == 0 && region_width == window.width &&
                      plan->sink->row_destination(0) != nullptr;
  JSAMPROW targets[kRowsPerBatch];
  for (int64_t done = 0; done < window.height;) {
    const JDIMENSION wanted =
        static_cast<JDIMENSION>(std::min<int64_t>(kRowsPerBatch, window.height - done));
    for (JDIMENSION i = 0; i < wanted; ++i) {
      targets[i] = direct ? plan->sink->row_destination(done + i) : rows[i];
    }
    JDIMENSION got = 0;
    while (got < wanted) {
      const JDIMENSION read = jpeg_read_scanlines(cinfo, targets + got, wanted - got);
      if (read == 0) {
        fail_with(reinterpret_cast<j_common_ptr>(cinfo),
                  "libjpeg returned no row (this is a bug in custom_op)");
      }
      got += read;
    }
    for (JDIMENSION i = 0; !direct && i < got; ++i) {
      plan->sink->consume(done + i, rows[i] + first_column);
    }
    done += got;
  }
  return true;
}

}  // namespace detail
}  // namespace custom_op
