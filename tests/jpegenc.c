/*
 * Tiny JPEG encoder over libjpeg, for tests only.
 *
 * Pillow cannot write 4:4:0 or 4:1:1 sampling, arithmetic coding, YCCK or
 * restart intervals in rows, so the tests build this file into a shared
 * library (see jpegenc.py) and call it through ctypes.
 */
#include <stdio.h> /* jpeglib.h uses FILE and size_t without including it */
#include <jpeglib.h>
#include <jerror.h> /* ERREXIT1 and the JERR_ codes */
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

/* jpegenc.py passes J_COLOR_SPACE values as plain ints. */
_Static_assert(JCS_GRAYSCALE == 1 && JCS_RGB == 2 && JCS_YCbCr == 3 &&
                   JCS_CMYK == 4 && JCS_YCCK == 5,
               "J_COLOR_SPACE values differ from jpegenc.py");

#define INITIAL_BUFFER_SIZE 65536

/* Growable output buffer that we own.  jpeg_mem_dest is not used because,
 * once it has grown its buffer, the only pointer to the live allocation is
 * private to libjpeg until jpeg_finish_compress: after an error it would leak
 * (or, freeing the caller's stale pointer, be freed twice). */
struct buffer_dest {
  struct jpeg_destination_mgr pub;
  unsigned char *data;
  size_t capacity;
  size_t size; /* bytes written, valid after term_destination */
};

/* Error manager that jumps back to jpegenc_encode instead of exit(). */
struct error_jump {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char *errbuf;
};

/* Everything libjpeg touches lives on the heap, so that no local variable is
 * modified between setjmp and longjmp (those would be indeterminate). */
struct encoder {
  struct jpeg_compress_struct cinfo;
  struct error_jump err;
  struct buffer_dest dest;
};

static void dest_init(j_compress_ptr cinfo) {
  struct buffer_dest *dest = (struct buffer_dest *)cinfo->dest;
  dest->data = malloc(INITIAL_BUFFER_SIZE);
  if (dest->data == NULL) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
  dest->capacity = INITIAL_BUFFER_SIZE;
  dest->pub.next_output_byte = dest->data;
  dest->pub.free_in_buffer = dest->capacity;
}

/* Called when the buffer is full: libjpeg wants the whole buffer flushed. */
static boolean dest_grow(j_compress_ptr cinfo) {
  struct buffer_dest *dest = (struct buffer_dest *)cinfo->dest;
  unsigned char *bigger = realloc(dest->data, dest->capacity * 2);
  if (bigger == NULL) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 1);
  dest->data = bigger;
  dest->pub.next_output_byte = bigger + dest->capacity;
  dest->pub.free_in_buffer = dest->capacity;
  dest->capacity *= 2;
  return TRUE;
}

static void dest_term(j_compress_ptr cinfo) {
  struct buffer_dest *dest = (struct buffer_dest *)cinfo->dest;
  dest->size = dest->capacity - dest->pub.free_in_buffer;
}

static void error_exit(j_common_ptr cinfo) {
  struct error_jump *err = (struct error_jump *)cinfo->err;
  if (err->errbuf != NULL) cinfo->err->format_message(cinfo, err->errbuf);
  longjmp(err->jump, 1);
}

/* Warnings must not go to the test's stderr; errors are reported via errbuf. */
static void output_message(j_common_ptr cinfo) { (void)cinfo; }

static void set_error(char *errbuf, const char *message) {
  if (errbuf != NULL) snprintf(errbuf, JMSG_LENGTH_MAX, "%s", message);
}

/* Checks libjpeg would otherwise not make before reading `pixels`. */
static int valid_arguments(const unsigned char *pixels, int width, int height,
                           int in_components, unsigned char **out,
                           unsigned long *out_size, char *errbuf) {
  if (pixels == NULL || out == NULL || out_size == NULL) {
    set_error(errbuf, "null pointer argument");
    return 0;
  }
  if (width <= 0 || height <= 0 || in_components < 1 || in_components > 4) {
    set_error(errbuf, "bad image size or component count");
    return 0;
  }
  return 1;
}

/* Sets every compression parameter; libjpeg validates the combination. */
static void configure(j_compress_ptr cinfo, int width, int height,
                      int in_components, int in_color_space,
                      int jpeg_color_space, const int *h_samp,
                      const int *v_samp, int quality, int progressive,
                      int restart_interval, int restart_in_rows,
                      int arithmetic, int optimize) {
  cinfo->image_width = (JDIMENSION)width;
  cinfo->image_height = (JDIMENSION)height;
  cinfo->input_components = in_components;
  cinfo->in_color_space = (J_COLOR_SPACE)in_color_space;
  jpeg_set_defaults(cinfo);
  /* Also chooses the Adobe marker (CMYK, YCCK, RGB) or JFIF header. */
  jpeg_set_colorspace(cinfo, (J_COLOR_SPACE)jpeg_color_space);
  for (int i = 0; i < cinfo->num_components; i++) {
    cinfo->comp_info[i].h_samp_factor = h_samp[i];
    cinfo->comp_info[i].v_samp_factor = v_samp[i];
  }
  jpeg_set_quality(cinfo, quality, TRUE);
  cinfo->arith_code = arithmetic ? TRUE : FALSE;
  cinfo->optimize_coding = optimize ? TRUE : FALSE;
  cinfo->restart_interval = (unsigned int)restart_interval;
  cinfo->restart_in_rows = restart_in_rows; /* wins over restart_interval */
  /* After jpeg_set_colorspace: the scan script depends on the components. */
  if (progressive) jpeg_simple_progression(cinfo);
}

static void write_rows(j_compress_ptr cinfo, const unsigned char *pixels) {
  size_t row_bytes = (size_t)cinfo->image_width * cinfo->input_components;
  while (cinfo->next_scanline < cinfo->image_height) {
    /* libjpeg only reads input rows; its API just lacks const. */
    JSAMPROW row = (JSAMPROW)(pixels + row_bytes * cinfo->next_scanline);
    jpeg_write_scanlines(cinfo, &row, 1);
  }
}

/*
 * Encodes height x width x in_components interleaved 8-bit pixels.
 * h_samp/v_samp hold one factor per JPEG component.  On success returns 0
 * and sets *out (free it with jpegenc_free) and *out_size; on failure
 * returns -1, sets *out to NULL and writes a message into errbuf (at least
 * JMSG_LENGTH_MAX bytes, may be NULL).
 */
int jpegenc_encode(const unsigned char *pixels, int width, int height,
                   int in_components, int in_color_space, int jpeg_color_space,
                   const int *h_samp, const int *v_samp, int quality,
                   int progressive, int restart_interval, int restart_in_rows,
                   int arithmetic, int optimize, unsigned char **out,
                   unsigned long *out_size, char *errbuf) {
  if (!valid_arguments(pixels, width, height, in_components, out, out_size,
                       errbuf))
    return -1;
  *out = NULL;
  *out_size = 0;
  /* calloc: a zeroed cinfo is safe to destroy even if creating it failed. */
  struct encoder *enc = calloc(1, sizeof *enc);
  if (enc == NULL) {
    set_error(errbuf, "out of memory");
    return -1;
  }
  enc->cinfo.err = jpeg_std_error(&enc->err.pub);
  enc->err.pub.error_exit = error_exit;
  enc->err.pub.output_message = output_message;
  enc->err.errbuf = errbuf;
  int status = -1;
  if (setjmp(enc->err.jump) == 0) {
    jpeg_create_compress(&enc->cinfo);
    enc->dest.pub.init_destination = dest_init;
    enc->dest.pub.empty_output_buffer = dest_grow;
    enc->dest.pub.term_destination = dest_term;
    enc->cinfo.dest = &enc->dest.pub;
    configure(&enc->cinfo, width, height, in_components, in_color_space,
              jpeg_color_space, h_samp, v_samp, quality, progressive,
              restart_interval, restart_in_rows, arithmetic, optimize);
    jpeg_start_compress(&enc->cinfo, TRUE);
    write_rows(&enc->cinfo, pixels);
    jpeg_finish_compress(&enc->cinfo);
    *out = enc->dest.data;
    *out_size = (unsigned long)enc->dest.size;
    enc->dest.data = NULL; /* ownership passed to the caller */
    status = 0;
  }
  /* The single exit path, reached normally or through longjmp. */
  jpeg_destroy_compress(&enc->cinfo);
  free(enc->dest.data);
  free(enc);
  return status;
}

void jpegenc_free(unsigned char *buffer) { free(buffer); }
