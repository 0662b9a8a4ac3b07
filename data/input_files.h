// The corpus files a `gpt2 prepare --input` names, and the format each is read in
// (data/doc_stream.h reads them).
#pragma once

#include <filesystem>
#include <vector>

namespace keel::data {

enum class InputFormat { text, jsonl };

struct InputFile {
  std::filesystem::path path;  // "-" is stdin
  InputFormat format = InputFormat::text;
  bool is_stdin() const { return path == "-"; }
};

// .jsonl / .json with optional .gz / .xz is JSON Lines, everything else plain text.
InputFormat format_for(const std::filesystem::path& path);

// What `--input` names, as files in order: "-" is stdin (once at most); a folder is every
// corpus file under it (.txt, .jsonl, .json, each optionally .gz / .xz, and bare .xz / .gz;
// hidden files skipped), sorted by path; a pattern with * ? or [ that is not an existing path is
// expanded as a shell glob, sorted. IoError for a folder or pattern that yields nothing, and for
// a FIFO, socket or device that one yields (opening it would block).
std::vector<InputFile> expand_inputs(const std::vector<std::filesystem::path>& specs);

}  // namespace keel::data
