// Which libjpeg-turbo the process actually runs: the headers' version says
// what custom_op was compiled against, but a wheel or a changed system may
// load another, and libjpeg-turbo 2.x has no call that returns its version.
// Its shared library (and any program it is linked into statically) carries
// the text "libjpeg-turbo version X.Y.Z" for `strings`; this reads it from
// the file that holds jpeg_std_error as loaded (dladdr).
//
// Only for reports (custom_op.libjpeg_version()); no decision depends on it.
// The decoder probes the one fault it works around (csrc/crop_quirk.h).
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include <jpeglib.h>

namespace custom_op {
namespace binding {

// Libraries are a few hundred KB; a static build inside a large extension
// stays under this. Beyond it we do not read.
constexpr std::streamsize kMaxLibraryBytes = std::streamsize{256} << 20;

// The version after "libjpeg-turbo version " in `path`, or "" when the file
// cannot be read or has no such text.
inline std::string version_in_file(const char* path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file || file.tellg() > kMaxLibraryBytes) {
    return "";
  }
  const std::streamsize size = file.tellg();
  std::string bytes(static_cast<size_t>(size), '\0');
  file.seekg(0);
  if (!file.read(&bytes[0], size)) {
    return "";
  }
  const std::string marker = "libjpeg-turbo version ";
  const size_t at = bytes.find(marker);
  if (at == std::string::npos) {
    return "";
  }
  size_t end = at + marker.size();
  while (end < bytes.size() && (std::isdigit(static_cast<unsigned char>(bytes[end])) || bytes[end] == '.')) {
    ++end;
  }
  return bytes.substr(at + marker.size(), end - at - marker.size());
}

// The loaded library's version, or "" when it cannot be told. Read once.
inline const std::string& loaded_libjpeg_version() {
  static const std::string version = [] {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&jpeg_std_error), &info) == 0 || info.dli_fname == nullptr) {
      return std::string();
    }
    return version_in_file(info.dli_fname);
  }();
  return version;
}

}  // namespace binding
}  // namespace custom_op
