// The compression names TF's file datasets take ("", "ZLIB", "GZIP") as zlib window bits: 0
// for none, 15 for a zlib stream, 15 + 16 for a gzip file.
#pragma once

#include <string>
#include <string_view>

#include "psflow/core/error.hpp"

namespace psflow::data::detail {

// InvalidArgument naming `what` (a file, a dataset) for any other name.
inline int zlib_window_bits(std::string_view compression, const std::string& what) {
  if (compression.empty()) return 0;
  if (compression == "ZLIB") return 15;
  if (compression == "GZIP") return 15 + 16;
  throw InvalidArgument("unknown compression '" + std::string(compression) + "' for " + what +
                        ": use \"\", \"ZLIB\" or \"GZIP\"");
}

}  // namespace psflow::data::detail
