// The MCU index checks of fuzz/core_test.cc (included there, after the
// helpers it uses): for every file the core can index (csrc/index_builder.h),
//   - a crop decoded with the index equals the same window of the whole
//     decode, bit for bit, in every mode and both pixel orders, with entries
//     at every MCU, every 3 MCUs, the budget's spacing and one per row, for
//     windows at the left and right edges, in the middle, one pixel wide,
//     within one entry and over the last (partial) MCU column; windows below
//     the first rows or narrow in the middle are really served from the
//     index (counted);
//   - the resized path at every DCT scale gives the same bytes with and
//     without the index;
//   - the index is refused, and the pixels stay exact, when any one of its
//     bytes is flipped, when it is cut short at any length, when it carries a
//     stale file checksum (re-sealed), when it is another file's index, and
//     when it claims a previous format version;
//   - the budget's spacing is the finest whose index is within a hundredth
//     of the file;
//   - a forged index (positions moved, re-sealed) never crashes the decode;
// and, without a file (check_index_coding), extreme entries survive the
// serialized form and hostile bit streams (re-sealed) are refused.
#pragma once

#include <string>
#include <vector>

#include "index_stats.h"
#include "mcu_index.h"

namespace {

// The index of `file`, or empty when the core cannot index it.
// `mcus_per_entry` 0 is the budget's spacing (jpeg_index's).
Bytes index_of(const Bytes& file, int64_t mcus_per_entry = 1) {
  DecodeOptions options;
  options.limits.max_pixels = kMaxPixels;
  JpegDecoder decoder(file.data(), file.size(), options);
  JpegInfo info;
  Bytes index;
  if (!decoder.read_header(&info).ok() || !decoder.build_index(mcus_per_entry, &index)) {
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

// Windows that exercise the column cut: at the left and right edges below the
// first rows, in the middle, one pixel wide, inside one MCU (so inside one
// entry), and over the last MCU column (partial when the width is not a
// multiple of the MCU's).
std::vector<Window> column_windows(const JpegInfo& info) {
  const int64_t h = info.height;
  const int64_t w = info.width;
  const int64_t mcu_w = 8 * info.max_h_samp_factor;
  const int64_t y = h / 2;
  const int64_t rows = std::max<int64_t>(1, h / 4);
  auto clip = [&](int64_t wy, int64_t wx, int64_t wh, int64_t ww) {
    wy = std::clamp<int64_t>(wy, 0, h - 1);
    wx = std::clamp<int64_t>(wx, 0, w - 1);
    return Window{wy, wx, std::max<int64_t>(1, std::min(wh, h - wy)),
                  std::max<int64_t>(1, std::min(ww, w - wx))};
  };
  return {
      clip(y, 0, rows, w / 5 + 1),                      // left edge
      clip(y, w - w / 5 - 1, rows, w / 5 + 1),          // right edge
      clip(y, w / 2 - w / 8, rows, w / 4 + 1),          // middle
      clip(y, w / 2 + 3, rows, 1),                      // one pixel wide
      clip(y, (w / 2) / mcu_w * mcu_w + 1, rows, std::max<int64_t>(1, mcu_w - 2)),  // one MCU
      clip(y, (w - 1) / mcu_w * mcu_w, rows, w),        // the last MCU column
      clip(y, (w - 1) / mcu_w * mcu_w - 1, rows, 2),    // across the last MCU column's edge
      clip(0, w / 2 - w / 8, rows, w / 4 + 1),          // the first rows, middle columns
      clip(1, 1, h - 2, w - 2),                         // all but a pixel on each side
  };
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
  const std::vector<Window> columns = column_windows(info);
  windows.insert(windows.end(), columns.begin(), columns.end());
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
  // A narrow window in the middle of a file of several MCU columns skips
  // columns on both sides: served too.
  const Window narrow = columns[2];
  if (deep.y >= 2 * 8 * info.max_v_samp_factor + 2 && info.width >= 8 * 8 * info.max_h_samp_factor) {
    const int64_t before = indexed_count();
    decode(file, narrow, ColorMode::kRgb, indexed, 0);
    c.expect(indexed_count() == before + 1, describe(narrow) + " was not served from the index");
  }
  for (int scale = 1; scale <= 8; ++scale) {
    for (const Window& window : {deep, windows[2], columns[0], columns[1], columns[3], columns[5]}) {
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
  for (uint8_t version : {uint8_t{1}, uint8_t{2}}) {
    Bytes old_version = index;
    old_version[4] = version;
    expect_refused(resealed(old_version), "the index claiming version " + std::to_string(version));
  }
  if (!other_index.empty() && other_index != index) {
    expect_refused(other_index, "another file's index");
  }
  // Forged: an entry's position moved by one bit and by one byte, re-sealed.
  // Such an index cannot be told from a true one without decoding from the
  // top, so only the absence of a crash or an error is checked.
  if (parsed.entries() >= 2) {
    for (uint64_t shift : {uint64_t{1}, uint64_t{8}}) {
      custom_op::mcu_index::Index forged = parsed;
      const size_t moved = forged.positions.size() / 2;
      forged.positions[moved] += shift;
      if (moved + 1 < forged.positions.size() && forged.positions[moved] >= forged.positions[moved + 1]) {
        continue;
      }
      const Bytes bytes = custom_op::mcu_index::serialize(forged);
      const Decoded crop = decode(file, deep, ColorMode::kRgb, with_index(bytes), 0x11);
      c.expect(crop.status.ok(), "a forged index made the decode fail: " + crop.status.message);
    }
  }
  // Entries every 3 MCUs, at the budget's spacing and once per row serve the
  // same pixels, and the budget's index stays near a hundredth of the file.
  for (int64_t spacing : {int64_t{3}, int64_t{0}, int64_t{1} << 20}) {
    const Bytes sparse = index_of(file, spacing);
    c.expect(!sparse.empty() && sparse.size() <= index.size(),
             "the index with spacing " + std::to_string(spacing) + " is missing or larger");
    const DecodeOptions sparse_options = with_index(sparse);
    for (const Window& window : {deep, columns[0], columns[1], columns[2], columns[4], columns[5]}) {
      const Decoded expected = decode(file, window, ColorMode::kRgb, plain, 0);
      const Decoded crop = decode(file, window, ColorMode::kRgb, sparse_options, 0x77);
      c.expect(crop.status.ok() && crop.pixels == expected.pixels,
               describe(window) + " with entries every " + std::to_string(spacing) +
                   " MCUs gives other pixels");
    }
  }
  // The budget's spacing is the finest within a hundredth of the file (the
  // next finer one is over it) unless it is one entry per row, and thinning
  // the entries of every MCU gives the bytes of a direct build.
  const Bytes budget = index_of(file, 0);
  custom_op::mcu_index::Index budget_parsed;
  c.expect(custom_op::mcu_index::parse(budget.data(), budget.size(), &budget_parsed),
           "the budget's index does not parse");
  const int64_t spacing = budget_parsed.mcus_per_entry;
  c.expect(budget == index_of(file, spacing), "the budget's index differs from a build at its spacing");
  if (spacing < budget_parsed.mcus_per_row) {
    c.expect(budget.size() <= file.size() / 100,
             "the budget's index is " + std::to_string(budget.size()) + " bytes for a file of " +
                 std::to_string(file.size()));
  }
  if (spacing > 1) {
    c.expect(index_of(file, spacing - 1).size() > file.size() / 100,
             "the budget's spacing " + std::to_string(spacing) + " is not the finest within it");
  }
  return c.passed();
}

namespace mi = custom_op::mcu_index;
namespace coding = custom_op::index_coding;

// An index of 8 x 4 MCUs of 3 components, an entry at each, whose entries
// take the extremes the form allows: steps of one bit and of a fortieth of
// the data, predictors at both bounds.
mi::Index extreme_index() {
  mi::Index index;
  index.file_size = uint64_t{1} << 20;
  index.file_hash = 0x0123456789ABCDEFULL;
  index.width = 64;
  index.height = 32;
  index.components = 3;
  for (int c = 0; c < 3; ++c) {
    index.h[c] = index.v[c] = 1;
  }
  index.mcus_per_row = 8;
  index.mcu_rows = 4;
  index.scan_data_offset = 600;
  const uint64_t data_bits = (index.file_size - index.scan_data_offset) * 8;
  for (int64_t e = 0; e < index.entries(); ++e) {
    index.positions.push_back(e == 0 ? 0 : index.positions.back() + (e % 2 ? 1 : data_bits / 40));
    for (int c = 0; c < 3; ++c) {
      index.predictors.push_back(e == 0 ? 0 : ((e + c) % 2 ? 1 : -1) * (mi::kMaxPredictor - 1));
    }
  }
  index.end_position = data_bits;
  return index;
}

// `index`'s header, then the bits `write` writes (padded), sealed.
template <typename Write>
Bytes sealed_stream(const mi::Index& index, Write write) {
  Bytes out;
  mi::put_header(index, &out);
  coding::BitWriter bits(&out);
  write(&bits);
  bits.finish();
  mi::put_le64(mi::file_hash(out.data(), out.size()), &out);
  return out;
}

// Whether residuals of every magnitude, in runs that drive the parameter up
// and down (escapes, the largest residual, the reader's byte-by-byte tail),
// read back as written, the stream ending at its padding.
bool rice_round_trip() {
  std::vector<uint64_t> residuals = {0, 1, 2, 1000, (uint64_t{1} << coding::kMaxResidualBits) - 1, 0, 3};
  uint64_t state = 35;
  for (int i = 0; i < 3000; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const int magnitude = static_cast<int>((state >> 58) % coding::kMaxResidualBits) * (i / 1000 + 1) / 3;
    residuals.push_back((state >> 7) & ((uint64_t{1} << magnitude) - 1));
  }
  Bytes stream;
  coding::BitWriter writer(&stream);
  coding::RiceContext written;
  for (uint64_t residual : residuals) {
    coding::put_rice(residual, &written, &writer);
  }
  writer.finish();
  coding::BitReader reader(stream.data(), stream.size());
  coding::RiceContext read;
  for (uint64_t residual : residuals) {
    uint64_t got = 0;
    if (!coding::get_rice(&read, &reader, &got) || got != residual) {
      return false;
    }
  }
  return reader.at_padded_end();
}

// A sealed index of the largest grid an image can have (one component,
// 65535 x 65535 pixels, an entry at each MCU), its stream long enough for
// that many entries: its entries would take far more than max_memory.
// parse() and entries_fit() refuse it from its header, and no entry is
// allocated (the vectors keep no capacity).
bool check_huge_sealed_index() {
  mi::Index huge;
  huge.file_size = uint64_t{1} << 40;
  huge.width = huge.height = 65535;
  huge.components = 1;
  huge.h[0] = huge.v[0] = 1;
  huge.mcus_per_row = huge.mcu_rows = 8192;
  huge.scan_data_offset = 600;
  const uint64_t stream_bytes = static_cast<uint64_t>(huge.entries()) * 2 / 8 + 1;
  const Bytes bytes = sealed_stream(huge, [&](coding::BitWriter* b) {
    for (uint64_t i = 0; i < stream_bytes; ++i) {
      b->zeros(8);
    }
  });
  const uint64_t max_memory = uint64_t{64} << 20;
  mi::Index parsed;
  const bool refused = !mi::parse(bytes.data(), bytes.size(), &parsed, max_memory) &&
                       !mi::parse(bytes.data(), bytes.size(), &parsed) &&
                       !mi::entries_fit(bytes.data(), bytes.size(), max_memory);
  return refused && parsed.positions.capacity() == 0 && parsed.predictors.capacity() == 0 &&
         mi::entries_bytes(huge) > mi::kDefaultMaxEntryBytes;
}

bool check_index_coding() {
  Case c("the index's bit code");
  const mi::Index extreme = extreme_index();
  const Bytes bytes = mi::serialize(extreme);
  mi::Index parsed;
  c.expect(mi::parse(bytes.data(), bytes.size(), &parsed) && parsed.positions == extreme.positions &&
               parsed.predictors == extreme.predictors && parsed.end_position == extreme.end_position,
           "extreme entries do not survive the serialized form");
  c.expect(rice_round_trip(), "residuals do not survive the Rice code");
  auto expect_refused = [&](const Bytes& bad, const std::string& what) {
    mi::Index unused;
    c.expect(!mi::parse(bad.data(), bad.size(), &unused), what + " was accepted");
  };
  // The fresh contexts' parameter is 2: a residual v is v >> 2 zeros, a 1,
  // then v's 2 low bits.
  expect_refused(sealed_stream(extreme, [](coding::BitWriter* b) { b->bits(0b100, 3); }),
                 "a step of 0");
  expect_refused(sealed_stream(extreme, [](coding::BitWriter* b) { b->zeros(25); b->bits(0b111, 3); }),
                 "a unary run past the escape");
  expect_refused(sealed_stream(extreme, [](coding::BitWriter* b) { b->zeros(24); b->bits(1, 1); b->bits(0, 6); }),
                 "an escape of bit length 0");
  expect_refused(sealed_stream(extreme, [](coding::BitWriter* b) {
                   b->zeros(24); b->bits(1, 1); b->bits(57, 6); b->bits(~uint64_t{0}, 56);
                 }),
                 "an escape of bit length 57");
  const uint64_t data_bits = (extreme.file_size - extreme.scan_data_offset) * 8;
  expect_refused(sealed_stream(extreme, [&](coding::BitWriter* b) {
                   coding::RiceContext context;
                   coding::put_rice(mi::zigzag(static_cast<int64_t>(data_bits) + 1), &context, b);
                 }),
                 "a step past the data");
  expect_refused(sealed_stream(extreme, [](coding::BitWriter* b) {
                   coding::RiceContext position, predictor;
                   coding::put_rice(mi::zigzag(1), &position, b);
                   coding::put_rice(mi::zigzag(mi::kMaxPredictor), &predictor, b);
                 }),
                 "a predictor out of range");
  // Cut anywhere in the stream, or followed by a byte, then re-sealed.
  // (resealed() replaces the last 8 bytes with the checksum.)
  Bytes header;
  mi::put_header(extreme, &header);
  for (size_t length = header.size(); length + 8 < bytes.size(); ++length) {
    expect_refused(resealed(Bytes(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(length + 8))),
                   "the stream cut to " + std::to_string(length - header.size()) + " bytes");
  }
  Bytes longer = bytes;
  longer.insert(longer.end() - 8, 0);
  expect_refused(resealed(longer), "the stream followed by a 0 byte");
  // One entry: the stream is the end step alone, 3 bits and 5 of padding.
  mi::Index single = extreme;
  single.mcus_per_row = single.mcu_rows = 1;
  single.width = single.height = 8;
  auto end_step_then = [&](uint64_t padding) {
    return sealed_stream(single, [&](coding::BitWriter* b) { b->bits(0b101, 3); b->bits(padding, 5); });
  };
  const Bytes padded = end_step_then(0);
  c.expect(mi::parse(padded.data(), padded.size(), &parsed) && parsed.end_position == 1,
           "a lone end step of 1 bit does not parse");
  expect_refused(end_step_then(1), "padding with a 1 bit");
  // 2^32 entries claimed by a few bytes: refused before allocating them.
  mi::Index huge = extreme;
  huge.width = huge.height = 65535;
  huge.mcus_per_row = huge.mcu_rows = 65535;
  expect_refused(sealed_stream(huge, [](coding::BitWriter* b) { b->bits(0b110, 3); }),
                 "an index of 2^32 entries in a byte");
  c.expect(check_huge_sealed_index(), "a huge sealed index was not refused before allocating");
  return c.passed();
}

}  // namespace
