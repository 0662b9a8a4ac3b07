// Corpus text files: plain, .xz or .gz. The generic file helpers (regular-file reads with a size
// limit, atomic writes, staging directories, bounded JSON) live in core/io.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "core/io.h"

namespace keel::data {

// The text of a corpus file, decompressed when its name ends in .xz (liblzma) or .gz (zlib).
// IoError on a missing or non-regular file, or on corrupt / truncated compressed data. A .gz
// file must start with the gzip magic bytes: zlib would otherwise read it as plain text.
//
// The whole text is held in memory, so it may be at most max_bytes long, compressed or not:
// a small .gz or .xz can expand a thousandfold (a "decompression bomb"), so decompression
// stops at the limit with an IoError naming the file and the limit, before memory runs out.
// `gpt2 prepare` streams its inputs instead (doc_stream.h): it takes files of any size.
std::string read_text_file(const std::filesystem::path& path, uint64_t max_bytes = io::kMaxFileBytes);

}  // namespace keel::data
