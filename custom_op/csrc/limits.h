// The limits a file must pass before anything proportional to its size is
// allocated: pixels, scans and working memory. Checked right after the
// header is read, so a few bytes that claim a huge image fail in
// microseconds, whatever the image would need.
//
// It owns the limits, the estimate of what libjpeg will allocate, and their
// messages (each names the keyword that raises the limit and the value
// needed). It must not decode or allocate: it reads the header's fields.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "jpeg_errors.h"

namespace custom_op {

struct Limits {
  // 16384 x 16384.
  int64_t max_pixels = int64_t{1} << 28;
  // A normal progressive file has about 10 scans; thousands of tiny scans are
  // a known way to make a decoder spin (TurboJPEG 3 and DALI cap them too).
  // Enforced while decoding by detail::ProgressMonitor.
  int64_t max_scans = 256;
  // Bytes of working memory one decode may use: libjpeg's buffers and
  // custom_op's own, not the output (whose size the caller chose). 256 MiB
  // holds the whole-image coefficient buffer of a progressive 4:2:0 photo of
  // 89 megapixels (4:4:4: 44), and refuses the 768 MiB that a 16384 x 16384
  // progressive header asks for.
  int64_t max_memory = int64_t{256} << 20;
};

// Holds a created decompressor to `limits` while it decodes: `progress`
// counts its scans against max_scans, and libjpeg's own memory accounting,
// a second line behind check_memory's estimate, makes its virtual arrays fail
// (there is no backing store) rather than exceed max_memory.
inline void apply_limits(const Limits& limits, detail::ProgressMonitor* progress,
                         jpeg_decompress_struct* cinfo) {
  progress->pub.progress_monitor = detail::progress_monitor_cb;
  progress->max_scans = limits.max_scans;
  cinfo->progress = &progress->pub;
  cinfo->mem->max_memory_to_use =
      static_cast<long>(std::min<int64_t>(limits.max_memory, std::numeric_limits<long>::max()));
}

// Checks the header's image size against limits.max_pixels.
inline Status check_pixels(const jpeg_decompress_struct& cinfo, const Limits& limits) {
  const int64_t pixels = static_cast<int64_t>(cinfo.image_width) * cinfo.image_height;
  if (pixels <= limits.max_pixels) {
    return Status{};
  }
  return Status{StatusCode::kDecodeError,
                "the image is " + std::to_string(cinfo.image_height) + " x " +
                    std::to_string(cinfo.image_width) + " (height x width) = " +
                    std::to_string(pixels) + " pixels, more than max_pixels=" +
                    std::to_string(limits.max_pixels)};
}

namespace detail {

inline int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace detail

// The bytes of libjpeg's whole-image coefficient buffer (jdcoefct.c's
// virtual arrays: every block of every component, padded to whole MCUs).
// Valid after jpeg_read_header, which sets the components' sizes in blocks.
inline int64_t coefficient_buffer_bytes(const jpeg_decompress_struct& cinfo) {
  int64_t total = 0;
  for (int c = 0; c < cinfo.num_components; ++c) {
    const jpeg_component_info& component = cinfo.comp_info[c];
    total += detail::round_up(component.width_in_blocks, component.h_samp_factor) *
             detail::round_up(component.height_in_blocks, component.v_samp_factor) *
             static_cast<int64_t>(sizeof(JBLOCK));
  }
  return total;
}

// Whether libjpeg keeps the whole image's coefficients while decoding: for
// progressive files and for baseline files whose components come in several
// scans (jdinput.c's has_multiple_scans).
inline bool keeps_whole_image(const jpeg_decompress_struct& cinfo) {
  return cinfo.progressive_mode || cinfo.comps_in_scan < cinfo.num_components;
}

// An upper bound of what libjpeg allocates per row of the image, whatever the
// window: its tables, the sample rows of every component (the upsampler keeps
// a few iMCU rows as context), and a row batch of 4-byte output pixels.
inline int64_t row_buffer_bytes(const jpeg_decompress_struct& cinfo) {
  const int64_t width = detail::round_up(cinfo.image_width, 64);
  const int64_t imcu_rows = static_cast<int64_t>(DCTSIZE) * cinfo.max_v_samp_factor;
  return (int64_t{1} << 20) + width * cinfo.num_components * imcu_rows * 4 + width * 4 * 16;
}

// What decoding the image of `cinfo` takes from max_memory before any buffer
// of custom_op's own.
inline int64_t decode_memory_bytes(const jpeg_decompress_struct& cinfo) {
  return row_buffer_bytes(cinfo) + (keeps_whole_image(cinfo) ? coefficient_buffer_bytes(cinfo) : 0);
}

// Checks `needed` bytes (an estimate made before allocating) against
// limits.max_memory; `why` says what takes most of it, for the message.
inline Status check_memory(int64_t needed, const Limits& limits, const char* why) {
  if (needed <= limits.max_memory) {
    return Status{};
  }
  // "a max_memory of N": the decode functions' keyword and the prepare tool's
  // --max-memory both read it.
  return Status{StatusCode::kDecodeError,
                "this image needs about " + std::to_string(needed) + " bytes of working memory" +
                    why + ", more than max_memory=" + std::to_string(limits.max_memory) +
                    "; a max_memory of " + std::to_string(needed) + " or more accepts it"};
}

// What takes a decode's memory, for check_memory's message.
inline const char* decode_memory_reason(const jpeg_decompress_struct& cinfo) {
  return keeps_whole_image(cinfo)
             ? " (libjpeg keeps every coefficient of a progressive or multi-scan image)"
             : "";
}

// The Status for a jump out of libjpeg: out-of-memory is not the data's
// fault; libjpeg's own memory accounting (max_memory_to_use, set to
// max_memory as a second line behind check_memory) is the limit's.
inline Status status_of(const detail::ErrorManager& err, const Limits& limits) {
  if (err.error_code == JERR_OUT_OF_MEMORY) {
    return Status{StatusCode::kOutOfMemory, err.message};
  }
  if (err.error_code == JERR_NO_BACKING_STORE) {
    return Status{StatusCode::kDecodeError,
                  "libjpeg needs more working memory than max_memory=" +
                      std::to_string(limits.max_memory) + " allows; pass a larger max_memory"};
  }
  return Status{StatusCode::kDecodeError, err.message};
}

}  // namespace custom_op
