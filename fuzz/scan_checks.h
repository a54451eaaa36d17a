// The entropy-pass checks of fuzz/core_test.cc (included there, after the
// helpers it uses): the index builder's bit reader (csrc/huffman.h,
// csrc/index_builder.h) and the plain reference of fuzz/reference_scan.h
// give the same outcome and the same position and DC predictors at every
// MCU
//   - for every file the index serves, and for copies of it damaged where
//     its entropy-coded data is: cut short at many lengths, bits flipped,
//     0xFF bytes, stuffed or not, and markers put in, EOI taken away
//     (check_scan_reader);
//   - for streams written with random Huffman tables (codes of every length
//     up to 16 bits, AC sizes up to 15, tables whose codes run out early) and
//     random grids of 1 to 4 components, each also damaged, and for streams
//     of random bytes (check_random_scans).
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "reference_scan.h"

namespace {

namespace huff = custom_op::huffman;

// Copies of `file` damaged from `begin` (its entropy-coded data) on.
std::vector<std::pair<std::string, Bytes>> damaged_scans(const Bytes& file, size_t begin,
                                                         uint64_t seed) {
  std::vector<std::pair<std::string, Bytes>> copies;
  const size_t n = file.size();
  if (begin >= n) {
    return copies;
  }
  const size_t data = n - begin;
  for (size_t part = 1; part <= 16; ++part) {
    const size_t length = begin + data * part / 17;
    copies.emplace_back("cut to " + std::to_string(length),
                        Bytes(file.begin(), file.begin() + static_cast<ptrdiff_t>(length)));
  }
  for (size_t tail : {1, 2, 3}) {
    copies.emplace_back("last " + std::to_string(tail) + " bytes cut",
                        Bytes(file.begin(), file.end() - static_cast<ptrdiff_t>(std::min(tail, data))));
  }
  Lcg random(seed);
  for (int i = 0; i < 12; ++i) {
    const size_t at = begin + static_cast<size_t>(random.below(static_cast<int64_t>(data)));
    Bytes flipped = file;
    flipped[at] ^= static_cast<uint8_t>(1u << random.below(8));
    copies.emplace_back("bit flipped at " + std::to_string(at), std::move(flipped));
  }
  const uint8_t inserts[][2] = {{0xFF, 0x00}, {0xFF, 0xD0}, {0xFF, 0xD9}, {0xFF, 0xFF}, {0xFF, 0xC4}};
  for (const auto& insert : inserts) {
    for (int i = 0; i < 3; ++i) {
      const size_t at = begin + static_cast<size_t>(random.below(static_cast<int64_t>(data)));
      Bytes changed = file;
      changed.insert(changed.begin() + static_cast<ptrdiff_t>(at), insert, insert + 2);
      copies.emplace_back("bytes inserted at " + std::to_string(at), std::move(changed));
    }
  }
  return copies;
}

// Whether the builder and the reference agree on `bytes` (scan layout
// `scan`), failing `c` with where they part when they do not.
void expect_agreement(Case* c, const Bytes& bytes, const custom_op::mcu_index::ScanLayout& scan,
                      const std::string& what) {
  std::string why;
  if (!reference_scan::builder_agrees(bytes.data(), bytes.size(), scan, &why)) {
    c->fail(what + ": " + why);
  }
}

bool check_scan_reader(const std::string& name, const Bytes& file, uint64_t seed) {
  Case c(name + " scan reader");
  custom_op::mcu_index::ScanLayout scan;
  if (!reference_scan::read_scan_layout(file.data(), file.size(), &scan)) {
    return true;  // Not a file the index serves.
  }
  expect_agreement(&c, file, scan, "the file");
  for (const auto& [what, bytes] : damaged_scans(file, scan.scan_data_offset, seed)) {
    expect_agreement(&c, bytes, scan, what);
  }
  return c.passed();
}

// A random Huffman table of symbols drawn from [0, alphabet): at each length
// some of the codes left (none at times, all at times), so that the codes
// are of every length up to 16, complete or not.
huff::Table random_table(Lcg* random, int alphabet, const std::vector<int>& wanted) {
  huff::Table table;
  table.present = true;
  std::vector<int> pool = wanted;
  for (int s = 0; s < alphabet; ++s) {
    if (std::find(pool.begin(), pool.end(), s) == pool.end()) {
      pool.push_back(s);
    }
  }
  // The wanted symbols first, then the others shuffled.
  for (size_t i = pool.size() - 1; i > wanted.size(); --i) {
    const size_t j = wanted.size() + static_cast<size_t>(random->below(static_cast<int64_t>(i - wanted.size() + 1)));
    std::swap(pool[i], pool[j]);
  }
  const int total_wanted = static_cast<int>(1 + random->below(static_cast<int64_t>(pool.size())));
  int free_codes = 2;
  int total = 0;
  for (int l = 1; l <= 16 && total < total_wanted; ++l) {
    int n = 0;
    if (l == 16 || random->below(3) == 0) {
      n = std::min(free_codes, total_wanted - total);
    } else if (free_codes > 1) {
      n = static_cast<int>(random->below(std::min(free_codes, total_wanted - total)));
    }
    table.counts[l] = static_cast<uint8_t>(n);
    total += n;
    free_codes = std::min((free_codes - n) * 2, 512);
    if (free_codes == 0) {
      break;
    }
  }
  // The canonical order: symbols listed by code length, as the counts say.
  for (int i = 0; i < total; ++i) {
    table.symbols[i] = static_cast<uint8_t>(pool[static_cast<size_t>(i)]);
  }
  return table;
}

// The symbols of `table` (those make_codes gives a code).
std::vector<int> codable(const huff::Codes& codes) {
  std::vector<int> symbols;
  for (int s = 0; s < 256; ++s) {
    if (codes.length[s] != 0) {
      symbols.push_back(s);
    }
  }
  return symbols;
}

// A scan of `scan`'s grid written with its tables: random symbols and value
// bits, blocks ended as libjpeg reads them, padded and followed by EOI.
// Empty when a table codes nothing.
Bytes random_scan_data(Lcg* random, const custom_op::mcu_index::ScanLayout& scan) {
  huff::Codes dc[custom_op::mcu_index::kMaxComponents];
  huff::Codes ac[custom_op::mcu_index::kMaxComponents];
  std::vector<int> dc_symbols[custom_op::mcu_index::kMaxComponents];
  std::vector<int> ac_symbols[custom_op::mcu_index::kMaxComponents];
  for (int c = 0; c < scan.components; ++c) {
    if (!huff::make_codes(scan.dc[c], &dc[c]) || !huff::make_codes(scan.ac[c], &ac[c])) {
      return {};
    }
    dc_symbols[c] = codable(dc[c]);
    ac_symbols[c] = codable(ac[c]);
  }
  Bytes out;
  huff::BitWriter writer(&out);
  auto put_symbol = [&](const huff::Codes& codes, const std::vector<int>& symbols) {
    const int s = symbols[static_cast<size_t>(random->below(static_cast<int64_t>(symbols.size())))];
    writer.put(codes.code[s], codes.length[s]);
    return s;
  };
  auto put_value = [&](int bits) {
    if (bits > 0) {
      writer.put(static_cast<uint32_t>(random->below(int64_t{1} << bits)), bits);
    }
  };
  const int64_t mcus = scan.grid.mcus_per_row * scan.grid.mcu_rows;
  for (int64_t mcu = 0; mcu < mcus; ++mcu) {
    for (int c = 0; c < scan.components; ++c) {
      for (int b = 0; b < scan.blocks_per_mcu(c); ++b) {
        put_value(put_symbol(dc[c], dc_symbols[c]) & 15);
        for (int k = 1; k < 64;) {
          const int s = put_symbol(ac[c], ac_symbols[c]);
          const int run = s >> 4;
          const int size = s & 15;
          if (size == 0 && run != 15) {
            break;
          }
          put_value(size);
          k += size == 0 ? 16 : run + 1;
        }
      }
    }
  }
  writer.finish();
  out.push_back(0xFF);
  out.push_back(0xD9);
  return out;
}

// A random layout: 1 to 4 components, sampling factors of 1 or 2 (1x1 for a
// lone component), an image of up to 40 x 40 pixels, random tables; DC
// tables favour categories up to 11 and AC tables hold an EOB, so that most
// streams get far.
custom_op::mcu_index::ScanLayout random_layout(Lcg* random) {
  custom_op::mcu_index::ScanLayout scan;
  scan.components = static_cast<int>(1 + random->below(4));
  int max_h = 1;
  int max_v = 1;
  for (int c = 0; c < scan.components; ++c) {
    scan.h[c] = scan.components == 1 ? 1 : static_cast<int>(1 + random->below(2));
    scan.v[c] = scan.components == 1 ? 1 : static_cast<int>(1 + random->below(2));
    max_h = std::max(max_h, scan.h[c]);
    max_v = std::max(max_v, scan.v[c]);
    scan.dc[c] = random_table(random, random->below(8) == 0 ? 16 : 12, {0, 1, 2});
    scan.ac[c] = random_table(random, 256, {0x00, 0x01, 0x11, 0xF0});
  }
  scan.grid = custom_op::restarts::mcu_grid(1 + random->below(40), 1 + random->below(40),
                                            scan.components, max_h, max_v);
  return scan;
}

bool check_random_scans() {
  Case c("random scans");
  Lcg random(42);
  int accepted = 0;
  for (int i = 0; i < 1500; ++i) {
    const custom_op::mcu_index::ScanLayout scan = random_layout(&random);
    const Bytes data = random_scan_data(&random, scan);
    if (data.empty()) {
      continue;
    }
    const std::string what = "random scan " + std::to_string(i);
    expect_agreement(&c, data, scan, what);
    custom_op::mcu_index::Index unused;
    accepted += reference_scan::walk(data.data(), data.size(), scan, &unused) ? 1 : 0;
    for (const auto& [damage, bytes] : damaged_scans(data, 0, static_cast<uint64_t>(i))) {
      expect_agreement(&c, bytes, scan, what + ", " + damage);
    }
    Bytes noise(static_cast<size_t>(1 + random.below(600)));
    for (uint8_t& b : noise) {
      // 0xFF more often than chance, so that stuffing and markers are met.
      b = random.below(8) == 0 ? 0xFF : static_cast<uint8_t>(random.below(256));
    }
    expect_agreement(&c, noise, scan, what + " over random bytes");
  }
  // Streams written with the tables must mostly be accepted, or the check
  // would only compare refusals.
  c.expect(accepted > 1000, "only " + std::to_string(accepted) + " of the written scans accepted");
  return c.passed();
}

}  // namespace
