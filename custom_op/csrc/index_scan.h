// What the MCU-row index needs of a file, read from libjpeg's parsed header:
// whether the file can be indexed at all, and its one scan's components and
// Huffman tables (mcu_index::ScanLayout). Only public fields of
// jpeg_decompress_struct are read, after jpeg_read_header has stopped at
// the first SOS, so the layout does not depend on libjpeg's private state.
#pragma once

#include <cstddef>
#include <cstring>

#include "index_builder.h"
#include "jpeg_errors.h"
#include "restart_seek.h"

namespace custom_op {
namespace mcu_index {

inline void copy_table(const JHUFF_TBL* from, huffman::Table* to) {
  to->present = from != nullptr;
  if (from != nullptr) {
    std::memcpy(to->counts, from->bits, sizeof(to->counts));
    std::memcpy(to->symbols, from->huffval, sizeof(to->symbols));
  }
}

// Fills `scan` from a header libjpeg has read, or returns false when the
// file is not one the index serves: progressive or arithmetic-coded, with
// restart markers (they already allow seeking), a first scan without every
// component (several scans), a precision other than 8 bits, a lone component
// with sampling factors other than 1x1, or a table the file never defined
// (libjpeg would substitute its standard tables only later).
inline bool scan_layout(const jpeg_decompress_struct& d, size_t scan_data_offset, ScanLayout* scan) {
  if (d.progressive_mode || d.arith_code || d.restart_interval != 0 || d.data_precision != 8 ||
      d.comps_in_scan != d.num_components || d.num_components < 1 ||
      d.num_components > kMaxComponents || d.Ss != 0 || d.Se != 63 || d.Ah != 0 || d.Al != 0) {
    return false;
  }
  int max_h = 1;
  int max_v = 1;
  restarts::max_sampling_factors(d.comp_info, d.num_components, &max_h, &max_v);
  if (d.num_components == 1 && (max_h != 1 || max_v != 1)) {
    return false;
  }
  scan->components = d.comps_in_scan;
  for (int c = 0; c < d.comps_in_scan; ++c) {
    const jpeg_component_info* component = d.cur_comp_info[c];
    if (component == nullptr || component->dc_tbl_no < 0 || component->dc_tbl_no >= NUM_HUFF_TBLS ||
        component->ac_tbl_no < 0 || component->ac_tbl_no >= NUM_HUFF_TBLS) {
      return false;
    }
    scan->h[c] = component->h_samp_factor;
    scan->v[c] = component->v_samp_factor;
    copy_table(d.dc_huff_tbl_ptrs[component->dc_tbl_no], &scan->dc[c]);
    copy_table(d.ac_huff_tbl_ptrs[component->ac_tbl_no], &scan->ac[c]);
    if (!scan->dc[c].present || !scan->ac[c].present) {
      return false;
    }
  }
  scan->grid = restarts::mcu_grid(d.image_width, d.image_height, d.num_components, max_h, max_v);
  scan->scan_data_offset = scan_data_offset;
  return true;
}

}  // namespace mcu_index
}  // namespace custom_op
