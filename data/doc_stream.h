// Documents read from a corpus file a piece at a time, so that memory does not grow with the
// file: `gpt2 prepare` streams files of many GB through this.
//
// Plain text: the rule of documents.h, applied as the text arrives; the documents are exactly
// those split_documents() gives for the whole text (tested), as long as no single paragraph
// run exceeds the buffer (documents.h rule 3 then cuts it at max_chars as it goes).
//
// JSON Lines (.jsonl, .jsonl.gz, .jsonl.xz): one JSON object per line, its string field
// `text_field` is one document (then cut at max_chars by rule 3; never joined to others).
//   - blank lines are skipped; other fields are ignored;
//   - an empty or whitespace-only text is skipped (it has nothing to learn);
//   - a line that is not a JSON object, lacks the field, has a non-string field, or holds
//     invalid UTF-8 is an IoError naming FILE:LINE (a corpus with bad records should be
//     cleaned, not silently thinned).
// Compression: .xz (liblzma), .gz (zlib); stdin ("-") may be plain or gzip. A .gz file must
// start with the gzip magic bytes (zlib would otherwise pass a damaged one through as text).
//
// Memory: the stream holds the open document (cut at max_chars as it goes) and the line being
// read, so memory does not grow with the file; but a single line or record has no natural
// bound (a 10 GB line, a JSON record of 10 GB, or gigabytes of blank lines). They are refused
// with an IoError naming FILE:LINE once more than max_held_bytes would be held at once
// (kMaxHeldBytes by default; `gpt2 prepare` passes a quarter of --memory-mb).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/documents.h"
#include "data/input_files.h"

namespace keel::data {

// The default bound on the text DocumentStream holds for one document (see above).
constexpr uint64_t kMaxHeldBytes = uint64_t{256} << 20;

class DocumentStream {
 public:
  DocumentStream(InputFile input, DocumentRule rule, std::string text_field = "text",
                 uint64_t max_held_bytes = kMaxHeldBytes);
  ~DocumentStream();
  DocumentStream(const DocumentStream&) = delete;
  DocumentStream& operator=(const DocumentStream&) = delete;

  // The next document into doc; false at the end. IoError (naming the file) when it cannot be
  // read, is corrupt, or holds no text at all ("is empty" / "only whitespace").
  bool next(std::string& doc);
  // Bytes of the file consumed so far (compressed bytes for compressed files), for progress.
  uint64_t bytes_read() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace keel::data
