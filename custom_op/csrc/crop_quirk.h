// A known fault of the loaded libjpeg-turbo's jpeg_crop_scanline(), found by
// trying it once, and the files it would spoil.
//
// libjpeg-turbo before 3.0.0 (its ChangeLog, 3.0.0 item 4) sets a cropped
// component's downsampled width to output_width * h / max_h. At a reduced
// DCT scale libjpeg may decode a subsampled component at a larger DCT size
// than the luma (jdmaster.c doubles it while both axes allow), and the width
// must then grow by that ratio; the old formula forgets it. The upsampler
// fills only the first part of such rows, and the colour converter reads the
// rest uninitialised: garbage pixels, not a crash. With chroma 1x1 this takes
// luma factors 4x2 or 2x4, where one axis stops the doubling before the
// other; at 8/8 there is no doubling at all.
//
// Which library is loaded is a run-time fact (a wheel built against 3.x may
// run on 2.x and back), and libjpeg-turbo 2.x has no run-time version call,
// so the fault is probed: a tiny 4x2 JPEG is encoded in memory once, cropped
// at 1/8, and the width libjpeg computes is compared with the right one.
// When the probe cannot run, the fault is assumed: the workaround (decoding
// every column at that scale) is always correct, only slower.
//
// It owns only that question. The decoder (jpeg_phases.h) asks it before
// calling jpeg_crop_scanline.
#pragma once

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first.
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>

#include "jpeg_errors.h"

namespace custom_op {
namespace detail {

#if JPEG_LIB_VERSION >= 70
inline int dct_scaled_size(const jpeg_component_info& c) { return c.DCT_h_scaled_size; }
inline int min_dct_scaled_size(const jpeg_decompress_struct& d) { return d.min_DCT_h_scaled_size; }
#else
inline int dct_scaled_size(const jpeg_component_info& c) { return c.DCT_scaled_size; }
inline int min_dct_scaled_size(const jpeg_decompress_struct& d) { return d.min_DCT_scaled_size; }
#endif

// The downsampled width of component `c` for an output `width` pixels wide,
// as libjpeg-turbo 3.0 computes it (and as the upsampler needs it).
inline long scaled_component_width(const jpeg_decompress_struct& d, const jpeg_component_info& c,
                                   long width) {
  const long numerator = width * c.h_samp_factor * dct_scaled_size(c);
  const long denominator = static_cast<long>(d.max_h_samp_factor) * min_dct_scaled_size(d);
  return (numerator + denominator - 1) / denominator;
}

// Whether a faulty jpeg_crop_scanline would spoil this decode: some component
// is decoded at another DCT size than the smallest and is then upsampled (a
// component decoded straight at output size never reads its width). Valid
// after jpeg_start_decompress.
inline bool crop_width_fault_applies(const jpeg_decompress_struct& d) {
  const int min_size = min_dct_scaled_size(d);
  for (int ci = 0; ci < d.num_components; ++ci) {
    const jpeg_component_info& c = d.comp_info[ci];
    const int size = dct_scaled_size(c);
    const bool full_size = c.h_samp_factor * size == d.max_h_samp_factor * min_size &&
                           c.v_samp_factor * size == d.max_v_samp_factor * min_size;
    if (size != min_size && !full_size) {
      return true;
    }
  }
  return false;
}

// The probe's JPEG: 64 x 16 pixels of one grey, luma 4x2, chroma 1x1.
constexpr int kProbeWidth = 64;
constexpr int kProbeHeight = 16;

struct ProbeBuffers {
  unsigned char* jpeg = nullptr;
  unsigned long jpeg_size = 0;
  JSAMPLE row[kProbeWidth * 3];
};

// Encodes the probe's JPEG into buffers->jpeg (malloc'ed by libjpeg).
// See Note [libjpeg error handling]: no destructor here, all state in `buffers`.
inline bool encode_probe_guarded(jpeg_compress_struct* c, ErrorManager* err,
                                 ProbeBuffers* buffers) {
  if (setjmp(err->jump)) {
    return false;
  }
  jpeg_create_compress(c);
  jpeg_mem_dest(c, &buffers->jpeg, &buffers->jpeg_size);
  c->image_width = kProbeWidth;
  c->image_height = kProbeHeight;
  c->input_components = 3;
  c->in_color_space = JCS_RGB;
  jpeg_set_defaults(c);
  c->comp_info[0].h_samp_factor = 4;
  c->comp_info[0].v_samp_factor = 2;
  for (int ci = 1; ci < 3; ++ci) {
    c->comp_info[ci].h_samp_factor = 1;
    c->comp_info[ci].v_samp_factor = 1;
  }
  jpeg_start_compress(c, TRUE);
  for (int i = 0; i < kProbeWidth * 3; ++i) {
    buffers->row[i] = 128;
  }
  JSAMPROW row = buffers->row;
  while (c->next_scanline < c->image_height) {
    jpeg_write_scanlines(c, &row, 1);
  }
  jpeg_finish_compress(c);
  return true;
}

// Decodes the probe's JPEG at 1/8, crops it to its left half and reports
// whether the chroma width libjpeg set differs from the right one.
inline bool crop_differs_guarded(jpeg_decompress_struct* d, ErrorManager* err,
                                 const ProbeBuffers* buffers, bool* differs) {
  if (setjmp(err->jump)) {
    return false;
  }
  jpeg_create_decompress(d);
  jpeg_mem_src(d, buffers->jpeg, buffers->jpeg_size);
  jpeg_read_header(d, TRUE);
  d->scale_num = 1;
  d->scale_denom = 8;
  d->do_fancy_upsampling = TRUE;
  jpeg_start_decompress(d);
  JDIMENSION x = 0;
  JDIMENSION width = d->output_width / 2;
  jpeg_crop_scanline(d, &x, &width);
  *differs = static_cast<long>(d->comp_info[1].downsampled_width) !=
             scaled_component_width(*d, d->comp_info[1], static_cast<long>(d->output_width));
  return true;
}

// Runs the probe; true when the fault is present or the probe failed.
inline bool probe_crop_width_fault() {
  ProbeBuffers buffers;
  bool faulty = true;
  {
    jpeg_compress_struct c;
    std::memset(&c, 0, sizeof(c));  // So that destroying a half-created one is safe.
    ErrorManager err;
    install_error_manager(reinterpret_cast<j_common_ptr>(&c), &err, /*strict=*/true);
    const bool encoded = encode_probe_guarded(&c, &err, &buffers);
    jpeg_destroy_compress(&c);
    if (!encoded) {
      std::free(buffers.jpeg);
      return true;
    }
  }
  jpeg_decompress_struct d;
  std::memset(&d, 0, sizeof(d));
  ErrorManager err;
  install_error_manager(reinterpret_cast<j_common_ptr>(&d), &err, /*strict=*/true);
  bool differs = true;
  if (crop_differs_guarded(&d, &err, &buffers, &differs)) {
    faulty = differs;
  }
  jpeg_destroy_decompress(&d);
  std::free(buffers.jpeg);
  return faulty;
}

}  // namespace detail

// Whether the loaded libjpeg's jpeg_crop_scanline miscounts the width of
// components decoded at a larger DCT size (libjpeg-turbo < 3.0.0). Probed
// once per process (thread-safe: a function-local static).
inline bool libjpeg_crop_width_fault() {
  static const bool faulty = detail::probe_crop_width_fault();
  return faulty;
}

}  // namespace custom_op
