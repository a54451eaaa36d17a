// libjpeg-turbo's error path, made safe for C++: the setjmp Note, the error
// manager whose callbacks longjmp, the progress monitor that enforces
// max_scans (counting each scan by its work), and the Status every core function returns.
//
// It owns the one include of jpeglib.h that checks the library's version,
// and it must stay free of pixels, windows and decoding policy: both the
// decoder (jpeg_decoder.h) and the lossless rewrite (prepare.h) build on it,
// and neither should see the other's concerns through it.
#pragma once

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first.
#include <string>

#include <jpeglib.h>
#include <jerror.h>

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

// kDecodeError is about the data (or a limit it exceeds); kOutOfMemory means
// an allocation failed, whatever the data; kInternalError is anything else
// that went wrong in custom_op or the libraries under it. The binding maps
// them to JpegDecodeError, MemoryError and RuntimeError, so that code which
// skips bad files never skips a file because memory ran out.
enum class StatusCode { kOk, kInvalidArgument, kDecodeError, kOutOfMemory, kInternalError };

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
// 1. A function that calls setjmp (the *_guarded functions) holds no object
//    with a destructor, and after the jump reads no local that it changed
//    after setjmp: the C standard leaves such locals indeterminate. On a
//    jump it only returns false; all state lives in memory owned by the
//    object that owns the libjpeg struct (JpegDecoder, Preparer), whose
//    destructor runs normally.
// 2. The callbacks format libjpeg's message into ErrorManager and longjmp.
//    They never throw: unwinding a C++ exception through libjpeg's C frames
//    depends on how libjpeg was compiled.
// 3. Every allocation made while a jump point is armed belongs to libjpeg's
//    pools (e.g. the row buffer comes from alloc_sarray), so
//    jpeg_destroy_decompress, called exactly once by the owner's destructor,
//    frees it whatever path the decode took. The output memory belongs to
//    the caller.
struct ErrorManager {
  jpeg_error_mgr pub;  // First member: libjpeg sees a jpeg_error_mgr*.
  std::jmp_buf jump;
  bool strict = true;
  // Appended to a warning raised as an error: says how to accept it.
  const char* strict_hint =
      "strict=True treats this libjpeg warning as an error; pass strict=False to accept damaged data";
  char message[JMSG_LENGTH_MAX + 160] = {0};
  // libjpeg's code for the error that jumped (e.g. JERR_OUT_OF_MEMORY), or
  // 0 for custom_op's own failures and for warnings raised as errors.
  int error_code = 0;
};

// max_scans bounds the work of a file's scans, not only their number: a
// progressive scan walks every block of its components, whatever its bytes
// (a run of empty blocks costs a few bits per 32767 blocks), so a few hundred
// KB of scans over a 100-megapixel image cost seconds. A scan's work is its
// blocks times (the coefficients of its band + kBlockOverhead): libjpeg pays
// a fixed cost per block and, in a refinement scan, a cost per coefficient of
// the band. A scan counts once per kScanWorkUnit of work, rounded up: a scan
// of up to 32768 blocks (2 megapixels of gray) counts once whatever its band,
// so a small image counts one per scan, as TurboJPEG's TJPARAM_SCANLIMIT
// counts every image's scans.
constexpr int64_t kBlockOverhead = 8;
constexpr int64_t kScanWorkUnit = int64_t{32768} * (DCTSIZE2 + kBlockOverhead);

struct ProgressMonitor {
  jpeg_progress_mgr pub;  // First member: libjpeg sees a jpeg_progress_mgr*.
  int64_t max_scans = 0;
  int counted_scan = 0;     // The last scan number counted into scan_units.
  int64_t scan_units = 0;   // The scans so far, each counted by its work.
};

// The work of the scan libjpeg has just read the header of (see kScanWorkUnit).
inline int64_t scan_work(const jpeg_decompress_struct& d) {
  int64_t blocks = 0;
  for (int i = 0; i < d.comps_in_scan; ++i) {
    blocks += static_cast<int64_t>(d.cur_comp_info[i]->width_in_blocks) *
              d.cur_comp_info[i]->height_in_blocks;
  }
  // A sequential scan covers the whole band (libjpeg leaves Ss, Se for it
  // at 0 and 63 or as read; either way at most 64).
  const int64_t band = d.progressive_mode ? d.Se - d.Ss + 1 : DCTSIZE2;
  return blocks * (std::max<int64_t>(band, 1) + kBlockOverhead);
}

inline ErrorManager* error_manager(j_common_ptr cinfo) {
  return reinterpret_cast<ErrorManager*>(cinfo->err);
}

// Jumps back to the armed setjmp with `message` and libjpeg's `error_code`
// (0 for custom_op's own). See Note [libjpeg error handling].
[[noreturn]] inline void fail_with(j_common_ptr cinfo, const char* message, int error_code = 0) {
  ErrorManager* err = error_manager(cinfo);
  std::snprintf(err->message, sizeof(err->message), "%s", message);
  err->error_code = error_code;
  std::longjmp(err->jump, 1);
}

[[noreturn]] inline void error_exit_cb(j_common_ptr cinfo) {
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  fail_with(cinfo, text, cinfo->err->msg_code);
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
  // Called many times per scan; each scan is counted once, when it starts,
  // before libjpeg decodes any of it.
  if (dinfo->input_scan_number != monitor->counted_scan) {
    monitor->counted_scan = dinfo->input_scan_number;
    monitor->scan_units += (scan_work(*dinfo) + kScanWorkUnit - 1) / kScanWorkUnit;
  }
  if (monitor->scan_units <= monitor->max_scans) {
    return;
  }
  char message[400];
  if (monitor->scan_units == dinfo->input_scan_number) {
    std::snprintf(message, sizeof(message),
                  "the file has more than %lld scans (limit max_scans=%lld)",
                  static_cast<long long>(monitor->max_scans),
                  static_cast<long long>(monitor->max_scans));
  } else {
    std::snprintf(message, sizeof(message),
                  "the file's scans are more work than max_scans=%lld allows: its first %d "
                  "scans count as %lld (a scan counts once per 2 megapixels it decodes in full; "
                  "a large image's scans count more); a max_scans of %lld or more accepts "
                  "them, later scans may need more",
                  static_cast<long long>(monitor->max_scans), dinfo->input_scan_number,
                  static_cast<long long>(monitor->scan_units),
                  static_cast<long long>(monitor->scan_units));
  }
  fail_with(cinfo, message);
}

// Points `cinfo` at `err` with the callbacks above. Call before
// jpeg_create_*, which reports its own failures through it.
inline void install_error_manager(j_common_ptr cinfo, ErrorManager* err, bool strict) {
  cinfo->err = jpeg_std_error(&err->pub);
  err->pub.error_exit = error_exit_cb;
  err->pub.emit_message = emit_message_cb;
  err->strict = strict;
}

}  // namespace detail
}  // namespace custom_op
