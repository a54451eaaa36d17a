// The MCU-row index checks of fuzz/core_test.cc (included there, after the
// helpers it uses): for every file the core can index (csrc/index_builder.h),
//   - a crop decoded with the index equals the same window of the whole
//     decode, bit for bit, in every mode and both pixel orders, and a window
//     below the first rows is really served from the index (counted);
//   - the resized path at every DCT scale gives the same bytes with and
//     without the index;
//   - the index is refused, and the pixels stay exact, when any one of its
//     bytes is flipped, when it is cut short at any length, when it carries a
//     stale file checksum (re-sealed), and when it is another file's index;
//   - a forged index (positions moved, re-sealed) never crashes the decode.
#pragma once

#include <string>
#include <vector>

#include "index_stats.h"
#include "mcu_index.h"

namespace {

// The index of `file`, or empty when the core cannot index it.
Bytes index_of(const Bytes& file, int64_t rows_per_entry = 1) {
  DecodeOptions options;
  options.limits.max_pixels = kMaxPixels;
  JpegDecoder decoder(file.data(), file.size(), options);
  JpegInfo info;
  Bytes index;
  if (!decoder.read_header(&info).ok() || !decoder.build_index(rows_per_entry, &index)) {
    return {};
  }
  return index;
}

DecodeOptions with_index(const Bytes& index) {
  DecodeOptions options;
  options.limits.max_pixels = kMaxPixels;
  options.index = index.data();
  options.index_size = index.size();
  return options;
}

// Re-seals a changed index body: its own checksum recomputed.
Bytes resealed(Bytes index) {
  index.resize(index.size() - 8);
  const uint64_t hash = custom_op::mcu_index::file_hash(index.data(), index.size());
  custom_op::mcu_index::put_le64(hash, &index);
  return index;
}

int64_t indexed_count() { return custom_op::index_outcome_count(custom_op::IndexOutcome::kIndexed); }

// A window starting below the first two MCU rows and a third of the image,
// which the index must serve (index_seek.h's worth_cutting asks for a
// sixteenth of the file above it).
Window deep_window(const JpegInfo& info) {
  const int64_t y = std::min<int64_t>(
      info.height - 1, std::max<int64_t>(2 * 8 * info.max_v_samp_factor + 3, info.height / 3));
  return Window{y, info.width / 3, std::max<int64_t>(1, (info.height - y) / 2),
                std::max<int64_t>(1, info.width / 2)};
}

bool check_index(const std::string& name, const Bytes& file, const Bytes& other_index,
                 uint64_t seed) {
  Case c(name + " [index]");
  const Bytes index = index_of(file);
  DecodeOptions plain;
  plain.limits.max_pixels = kMaxPixels;
  const Decoded probe = decode(file, Window{}, ColorMode::kRgb, plain, 0);
  if (index.empty() || !probe.status.ok()) {
    return true;  // Which files must be indexable is tests/test_index.py's business.
  }
  const JpegInfo& info = probe.info;
  c.expect(index == index_of(file), "two builds of the index differ");
  custom_op::mcu_index::Index parsed;
  c.expect(custom_op::mcu_index::parse(index.data(), index.size(), &parsed),
           "the built index does not parse");
  const DecodeOptions indexed = with_index(index);
  std::vector<Window> windows = windows_for(info, seed);
  windows.push_back(deep_window(info));
  for (ColorMode mode : {ColorMode::kRgb, ColorMode::kGray, ColorMode::kUnchanged}) {
    const Decoded whole = decode(file, Window{}, mode, plain, 0);
    const int channels = custom_op::output_channels(info, mode);
    for (const Window& window : windows) {
      for (custom_op::PixelOrder order :
           {custom_op::PixelOrder::kPlanar, custom_op::PixelOrder::kInterleaved}) {
        const Decoded crop = decode(file, window, mode, indexed, 0x5a, order);
        const bool planar = order == custom_op::PixelOrder::kPlanar;
        c.expect(crop.status.ok() &&
                     (planar ? crop.pixels : to_planes(crop.pixels, channels)) ==
                         cut(whole.pixels, info, channels, window),
                 describe(window) + " with the index differs from the whole decode's window in " +
                     mode_name(mode) + (planar ? " CHW" : " HWC") + ": " + crop.status.message);
      }
    }
  }
  const Window deep = deep_window(info);
  if (deep.y >= 2 * 8 * info.max_v_samp_factor + 2) {
    const int64_t before = indexed_count();
    decode(file, deep, ColorMode::kRgb, indexed, 0);
    c.expect(indexed_count() == before + 1, describe(deep) + " was not served from the index");
  }
  for (int scale = 1; scale <= 8; ++scale) {
    for (const Window& window : {deep, windows[2], windows[windows.size() - 2]}) {
      const int out_h = static_cast<int>(std::max<int64_t>(1, window.height * scale / 9));
      const int out_w = static_cast<int>(std::max<int64_t>(1, window.width * scale / 7));
      const Decoded reference = decode_resized(file, window, ColorMode::kRgb, plain, scale, out_h, out_w, 0);
      const Decoded resized = decode_resized(file, window, ColorMode::kRgb, indexed, scale, out_h, out_w, 0xff);
      c.expect(reference.status.ok() && resized.status.ok() && reference.pixels == resized.pixels,
               describe(window) + " resized at scale " + std::to_string(scale) +
                   "/8 differs with the index");
    }
  }
  // Damaged, stale and foreign indexes: refused, and the pixels exact.
  const Decoded reference = decode(file, deep, ColorMode::kRgb, plain, 0);
  auto expect_refused = [&](const Bytes& bad, const std::string& what) {
    const int64_t before = indexed_count();
    const Decoded crop = decode(file, deep, ColorMode::kRgb, with_index(bad), 0x33);
    c.expect(indexed_count() == before, what + " was used");
    c.expect(crop.status.ok() && crop.pixels == reference.pixels, what + " changed the pixels");
  };
  for (size_t i = 0; i < index.size(); ++i) {
    Bytes flipped = index;
    flipped[i] ^= static_cast<uint8_t>(1u << (i % 8));
    expect_refused(flipped, "the index with byte " + std::to_string(i) + " flipped");
  }
  for (size_t length = 0; length < index.size(); length += 1 + length / 16) {
    expect_refused(Bytes(index.begin(), index.begin() + static_cast<ptrdiff_t>(length)),
                   "the index cut to " + std::to_string(length) + " bytes");
  }
  Bytes stale = index;
  stale[6] ^= 0x40;  // Inside the file checksum (after magic, version, a varint size).
  expect_refused(resealed(stale), "the index with a stale file checksum");
  if (!other_index.empty() && other_index != index) {
    expect_refused(other_index, "another file's index");
  }
  // Forged: an entry's position moved by one bit and by one byte, re-sealed.
  // Such an index cannot be told from a true one without decoding from the
  // top, so only the absence of a crash or an error is checked.
  if (parsed.entries() >= 2) {
    for (uint64_t shift : {uint64_t{1}, uint64_t{8}}) {
      custom_op::mcu_index::Index forged = parsed;
      forged.positions[1] += shift;
      if (forged.entries() > 2 && forged.positions[1] >= forged.positions[2]) {
        continue;
      }
      const Bytes bytes = custom_op::mcu_index::serialize(forged);
      const Decoded crop = decode(file, deep, ColorMode::kRgb, with_index(bytes), 0x11);
      c.expect(crop.status.ok(), "a forged index made the decode fail: " + crop.status.message);
    }
  }
  // Entries every 3 rows serve the same pixels.
  const Bytes sparse = index_of(file, 3);
  const Decoded sparse_crop = decode(file, deep, ColorMode::kRgb, with_index(sparse), 0x77);
  c.expect(!sparse.empty() && sparse.size() <= index.size() && sparse_crop.pixels == reference.pixels,
           "an index with an entry every 3 rows gives other pixels");
  return c.passed();
}

}  // namespace
