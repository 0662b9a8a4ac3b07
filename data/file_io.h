// Corpus text files: plain, .xz or .gz. The generic file helpers (regular-file reads with a size
// limit, atomic writes, staging directories, bounded JSON) live in core/io.h.
#pragma once

#include <filesystem>
#include <string>

namespace keel::data {

// The text of a corpus file, decompressed when its name ends in .xz (liblzma) or .gz (zlib).
// IoError on a missing or non-regular file, or on corrupt / truncated compressed data. A .gz
// file must start with the gzip magic bytes: zlib would otherwise read it as plain text.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace keel::data
