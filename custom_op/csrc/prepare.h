// Lossless preparation of a JPEG for seeking: the DCT coefficients are read
// and written back untouched (jpeg_read_coefficients and
// jpeg_write_coefficients, as jpegtran does), so every decoded pixel stays
// the same, while the file becomes one baseline scan with
//   - a restart marker every `interval` MCUs, the interval dividing the MCUs
//     per row, so that restart_seek.h can decode a window from the segments
//     covering it;
//   - Huffman tables optimised for this image, which usually save more bytes
//     than the markers cost.
// Progressive and arithmetic-coded files become baseline Huffman files the
// same way. Metadata segments (Exif, ICC profiles, comments) are copied. A
// file with bytes after its end-of-image marker is refused (see run()).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "jpeg_errors.h"
#include "limits.h"
#include "restart_seek.h"

namespace custom_op {

struct PrepareOptions {
  // Aim for restart segments this many pixels wide: narrower means crops
  // decode fewer unneeded columns, and more markers.
  int64_t segment_width = 64;
  // ... and at least this many bytes long on average, so that light images
  // do not pay a marker (about 3 bytes with its padding and the reset DC
  // prediction) per few dozen bytes of data.
  int64_t min_segment_bytes = 384;
  Limits limits;
};

// prepare_jpeg's refusal of a file with bytes after its end-of-image marker.
// One text for every such file, so that a summary groups them.
inline constexpr const char* kDataAfterEndOfImage =
    "data follows the end-of-image marker (a second image, a gain map or a motion photo?); a "
    "rewrite would drop it or break the offsets that point into it";

// prepare_jpeg's refusal of a file with a JFIF or Adobe marker between its scans.
inline constexpr const char* kLateColourMarker =
    "a JFIF or Adobe marker after the first scan; the copy's header cannot hold it without "
    "changing the colours decoders see, nor leave it out without losing it";

struct PrepareInfo {
  int restart_interval = 0;  // MCUs per segment in the output.
  bool was_progressive = false;
};

namespace detail {

// The restart interval to write: the divisor of mcus_per_row closest (by
// ratio) to the ideal number of MCUs per segment.
inline int64_t choose_restart_interval(int64_t mcus_per_row, int64_t mcu_width,
                                       int64_t bytes_per_mcu, const PrepareOptions& options) {
  // Clamped first: segment_width comes from the caller, and no segment is
  // wider than a row.
  const int64_t segment_width = std::min(options.segment_width, mcus_per_row * mcu_width);
  const int64_t for_width = (segment_width + mcu_width - 1) / mcu_width;
  const int64_t for_bytes = (options.min_segment_bytes + std::max<int64_t>(bytes_per_mcu, 1) - 1) /
                            std::max<int64_t>(bytes_per_mcu, 1);
  const double ideal = static_cast<double>(std::max<int64_t>({for_width, for_bytes, 1}));
  int64_t best = 1;
  double best_distance = 1e300;
  for (int64_t d = 1; d <= mcus_per_row; ++d) {
    if (mcus_per_row % d != 0) {
      continue;
    }
    const double ratio = d > ideal ? d / ideal : ideal / d;
    if (ratio < best_distance) {
      best = d;
      best_distance = ratio;
    }
  }
  return best;
}

// A libjpeg destination that grows a malloc'ed buffer. The buffer belongs to
// the Preparer, whose destructor frees it, so an error in mid-write leaks
// nothing (jpeg_mem_dest would leak its buffer on a longjmp).
struct GrowingDestination {
  jpeg_destination_mgr pub;  // First member: libjpeg sees a jpeg_destination_mgr*.
  unsigned char* buffer = nullptr;
  size_t capacity = 0;
  size_t size = 0;
};

inline void grow_destination(j_compress_ptr cinfo, size_t capacity) {
  auto* dest = reinterpret_cast<GrowingDestination*>(cinfo->dest);
  auto* grown = static_cast<unsigned char*>(std::realloc(dest->buffer, capacity));
  if (grown == nullptr) {
    fail_with(reinterpret_cast<j_common_ptr>(cinfo), "out of memory while writing the prepared file",
              JERR_OUT_OF_MEMORY);
  }
  const size_t used = dest->capacity - dest->pub.free_in_buffer;
  dest->buffer = grown;
  dest->capacity = capacity;
  dest->pub.next_output_byte = grown + used;
  dest->pub.free_in_buffer = capacity - used;
}

inline void init_destination_cb(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<GrowingDestination*>(cinfo->dest);
  dest->pub.free_in_buffer = dest->capacity;  // Nothing used yet.
  grow_destination(cinfo, std::max<size_t>(dest->capacity, 65536));
}

inline boolean empty_output_buffer_cb(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<GrowingDestination*>(cinfo->dest);
  // libjpeg calls this when the buffer is full, without updating the counts.
  dest->pub.free_in_buffer = 0;
  grow_destination(cinfo, dest->capacity * 2);
  return TRUE;
}

inline void term_destination_cb(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<GrowingDestination*>(cinfo->dest);
  dest->size = dest->capacity - dest->pub.free_in_buffer;
}

inline bool is_jfif(const jpeg_saved_marker_ptr marker) {
  const JOCTET* d = marker->data;
  return marker->marker == JPEG_APP0 && marker->data_length >= 5 && d[0] == 'J' && d[1] == 'F' &&
         d[2] == 'I' && d[3] == 'F' && d[4] == 0;
}

inline bool is_adobe(const jpeg_saved_marker_ptr marker) {
  const JOCTET* d = marker->data;
  return marker->marker == JPEG_APP0 + 14 && marker->data_length >= 5 && d[0] == 'A' &&
         d[1] == 'd' && d[2] == 'o' && d[3] == 'b' && d[4] == 'e';
}

// Whether a saved marker goes into the copy: all do, except a JFIF or Adobe
// marker that jpeg_write_coefficients writes by itself (it writes one only
// when the source's header had none, see Preparer::write_guarded, so this
// keeps a second one out). Files with such a marker after their first scan
// are refused before the copy (Preparer::run).
inline bool copied_marker(j_compress_ptr dst, const jpeg_saved_marker_ptr marker) {
  return !((is_jfif(marker) && dst->write_JFIF_header) ||
           (is_adobe(marker) && dst->write_Adobe_marker));
}

}  // namespace detail

// Owns a decompressor and a compressor for one lossless rewrite. Call run()
// once; see Note [libjpeg error handling] for the setjmp discipline, which
// the two *_guarded phases follow.
class Preparer {
 public:
  Preparer(const uint8_t* data, size_t size, const PrepareOptions& options)
      : data_(data), size_(size), options_(options) {
    std::memset(&src_, 0, sizeof(src_));
    std::memset(&dst_, 0, sizeof(dst_));
    // Strict: damaged data would be written back as if it were right.
    detail::install_error_manager(reinterpret_cast<j_common_ptr>(&src_), &src_err_, /*strict=*/true);
    detail::install_error_manager(reinterpret_cast<j_common_ptr>(&dst_), &dst_err_, /*strict=*/true);
    for (detail::ErrorManager* err : {&src_err_, &dst_err_}) {
      err->strict_hint = "prepare refuses damaged data: the copy would make the damage permanent";
    }
    created_ = create_guarded();
    if (created_) {
      apply_limits(options.limits, &progress_, &src_);
    }
  }

  ~Preparer() {
    jpeg_destroy_compress(&dst_);
    jpeg_destroy_decompress(&src_);
    std::free(destination_.buffer);
  }

  Preparer(const Preparer&) = delete;
  Preparer& operator=(const Preparer&) = delete;

  // Writes the prepared file into `out`.
  Status run(std::vector<uint8_t>* out, PrepareInfo* info) {
    if (!created_ || !read_guarded()) {
      return status_of(src_err_, options_.limits);
    }
    if (src_.data_precision != 8) {
      return Status{StatusCode::kDecodeError, "unsupported data precision " +
                                                  std::to_string(src_.data_precision) +
                                                  " (only 8-bit JPEG files are prepared)"};
    }
    Status within_limits = check_pixels(src_, options_.limits);
    if (!within_limits.ok()) {
      return within_limits;
    }
    // jpeg_read_coefficients keeps every coefficient, whatever the file's
    // kind, and the output buffer grows to about the input's size (doubling).
    within_limits = check_memory(row_buffer_bytes(src_) + coefficient_buffer_bytes(src_) +
                                     2 * (static_cast<int64_t>(size_) + 65536),
                                 options_.limits,
                                 " (the rewrite keeps every coefficient of the file)");
    if (!within_limits.ok()) {
      return within_limits;
    }
    info->was_progressive = src_.progressive_mode != 0;
    if (!read_coefficients_guarded()) {
      return status_of(src_err_, options_.limits);
    }
    // libjpeg stops reading at the end-of-image marker, so the copy would end
    // there too. What follows it in a file that decoders accept is a second
    // image (a multi-picture file), a gain map or a motion photo's video, and
    // the offsets that find them (MPF's) count from the primary image's
    // header: appending them to a rewritten image of another length would
    // point those offsets at the wrong bytes. Such files are refused, so the
    // caller keeps them whole.
    if (src_.src->bytes_in_buffer != 0) {
      return Status{StatusCode::kDecodeError, kDataAfterEndOfImage};
    }
    // The copy's header holds every marker, so a JFIF or Adobe marker that
    // the source had after its first scan (where libjpeg had already chosen
    // the colour space) would move in front of the frame and change how
    // decoders convert the colours, and leaving it out would lose it
    // (fuzz/regressions/late-jfif-marker-changes-colour-space.jpg).
    if (late_colour_marker()) {
      return Status{StatusCode::kDecodeError, kLateColourMarker};
    }
    if (!progression_complete()) {
      return Status{StatusCode::kDecodeError,
                    "the progressive scans stop before every coefficient is complete; libjpeg "
                    "smooths such blocks when decoding, a baseline copy would not, so the "
                    "pixels would change"};
    }
    if (!write_guarded(info)) {
      return status_of(dst_err_.message[0] != 0 ? dst_err_ : src_err_, options_.limits);
    }
    out->assign(destination_.buffer, destination_.buffer + destination_.size);
    return Status{};
  }

 private:
  // Creating either struct can fail (out of memory, a library/header
  // version mismatch), so both jump points are armed.
  bool create_guarded() {
    if (setjmp(src_err_.jump)) {
      return false;
    }
    if (setjmp(dst_err_.jump)) {
      return false;
    }
    jpeg_create_decompress(&src_);
    jpeg_create_compress(&dst_);
    return true;
  }

  bool read_guarded() {
    if (setjmp(src_err_.jump)) {
      return false;
    }
    jpeg_mem_src(&src_, data_, static_cast<unsigned long>(size_));
    jpeg_save_markers(&src_, JPEG_COM, 0xFFFF);
    for (int m = 0; m < 16; ++m) {
      jpeg_save_markers(&src_, JPEG_APP0 + m, 0xFFFF);
    }
    jpeg_read_header(&src_, TRUE);
    header_markers_ = 0;  // those saved so far; the rest come between the scans
    for (jpeg_saved_marker_ptr m = src_.marker_list; m != nullptr; m = m->next) {
      ++header_markers_;
    }
    return true;
  }

  bool read_coefficients_guarded() {
    if (setjmp(src_err_.jump)) {
      return false;
    }
    coefficients_ = jpeg_read_coefficients(&src_);
    return true;
  }

  // Reads of the source during the write (its virtual arrays) report through
  // the source's manager, so both jump points are armed.
  bool write_guarded(PrepareInfo* info) {
    if (setjmp(dst_err_.jump)) {
      return false;
    }
    if (setjmp(src_err_.jump)) {
      return false;
    }
    jpeg_copy_critical_parameters(&src_, &dst_);
    // A JFIF or Adobe marker in the source's header is copied as it is
    // rather than replaced by the one libjpeg writes from the colour
    // parameters: the source's may hold more (a JFIF thumbnail, Adobe's
    // flags), and decoders then see exactly the markers the source showed them.
    if (header_has(detail::is_jfif)) {
      dst_.write_JFIF_header = FALSE;
    }
    if (header_has(detail::is_adobe)) {
      dst_.write_Adobe_marker = FALSE;
    }
    dst_.optimize_coding = TRUE;
    dst_.restart_interval = static_cast<unsigned int>(restart_interval());
    info->restart_interval = static_cast<int>(dst_.restart_interval);
    destination_.pub.init_destination = detail::init_destination_cb;
    destination_.pub.empty_output_buffer = detail::empty_output_buffer_cb;
    destination_.pub.term_destination = detail::term_destination_cb;
    destination_.capacity = size_ + 4096;
    dst_.dest = &destination_.pub;
    jpeg_write_coefficients(&dst_, coefficients_);
    for (jpeg_saved_marker_ptr m = src_.marker_list; m != nullptr; m = m->next) {
      if (detail::copied_marker(&dst_, m)) {
        jpeg_write_marker(&dst_, m->marker, m->data, m->data_length);
      }
    }
    jpeg_finish_compress(&dst_);
    jpeg_finish_decompress(&src_);
    return true;
  }

  // Whether a marker saved from the source's header (before its first scan)
  // passes `test`.
  bool header_has(bool (*test)(const jpeg_saved_marker_ptr)) const {
    size_t index = 0;
    for (jpeg_saved_marker_ptr m = src_.marker_list; m != nullptr && index < header_markers_;
         m = m->next, ++index) {
      if (test(m)) {
        return true;
      }
    }
    return false;
  }

  // Whether a JFIF or Adobe marker was saved after the source's header.
  bool late_colour_marker() const {
    size_t index = 0;
    for (jpeg_saved_marker_ptr m = src_.marker_list; m != nullptr; m = m->next, ++index) {
      if (index >= header_markers_ && (detail::is_jfif(m) || detail::is_adobe(m))) {
        return true;
      }
    }
    return false;
  }

  // Whether every coefficient of every component arrived at full precision.
  // A progressive file may end after its first scans (valid, or cut short);
  // libjpeg then estimates the missing coefficients ("block smoothing") while
  // decoding, which copying the coefficients into a baseline file would lose.
  bool progression_complete() const {
    if (!src_.progressive_mode || src_.coef_bits == nullptr) {
      return true;
    }
    for (int c = 0; c < src_.num_components; ++c) {
      for (int k = 0; k < DCTSIZE2; ++k) {
        if (src_.coef_bits[c][k] != 0) {
          return false;
        }
      }
    }
    return true;
  }

  // The output is one scan of every component (jpeg_copy_critical_parameters
  // leaves no scan script), so its MCU grid is restarts::mcu_grid's.
  int64_t restart_interval() const {
    int max_h = 1;
    int max_v = 1;
    restarts::max_sampling_factors(dst_.comp_info, dst_.num_components, &max_h, &max_v);
    const restarts::ScanGeometry grid =
        restarts::mcu_grid(dst_.image_width, dst_.image_height, dst_.num_components, max_h, max_v);
    const int64_t bytes_per_mcu =
        static_cast<int64_t>(size_) / std::max<int64_t>(grid.mcus_per_row * grid.mcu_rows, 1);
    return detail::choose_restart_interval(grid.mcus_per_row, grid.mcu_width, bytes_per_mcu, options_);
  }

  const uint8_t* data_;
  size_t size_;
  PrepareOptions options_;
  jpeg_decompress_struct src_;
  jpeg_compress_struct dst_;
  detail::ErrorManager src_err_;
  detail::ErrorManager dst_err_;
  detail::ProgressMonitor progress_;
  detail::GrowingDestination destination_;
  jvirt_barray_ptr* coefficients_ = nullptr;
  bool created_ = false;
  size_t header_markers_ = 0;
};

// Rewrites one JPEG losslessly for seeking; see the top of this file.
inline Status prepare_jpeg(const uint8_t* data, size_t size, const PrepareOptions& options,
                           std::vector<uint8_t>* out, PrepareInfo* info) {
  Preparer preparer(data, size, options);
  return preparer.run(out, info);
}

}  // namespace custom_op
