// What a "document" is when keel prepares a corpus of plain-text books.
//
// Plain-text corpora carry no document markup, so keel uses the layout they share: chapters,
// books and speeches are separated by two or more blank lines, paragraphs by one. Then:
//   1. a file is cut at every run of two or more blank lines into sections;
//   2. consecutive sections are joined until the document reaches min_chars, so a title or
//      a "CHAPTER 1" heading stays with the text it heads;
//   3. a document longer than max_chars is cut at the last paragraph break (a blank line)
//      before max_chars, else at the last line break, else at a UTF-8 boundary.
// Documents never span files and never start or end with a line break. For the Austen
// novels this gives one document per chapter (275 over the six novels).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace keel::data {

struct DocumentRule {
  size_t min_chars = 4 * 1024;
  size_t max_chars = 256 * 1024;
};

// Where rule 3 cuts a document longer than max_chars (0 < cut <= max_chars); shared with the
// streaming splitter (doc_stream.h), which must cut exactly as split_documents does.
size_t document_cut(std::string_view doc, size_t max_chars);

// Rule 3 on one document: line breaks trimmed from both ends, then cut into pieces of at most
// max_chars (whitespace-only pieces dropped), appended to out as views into doc.
void cut_document(std::string_view doc, size_t max_chars, std::vector<std::string_view>& out);

// Views into text, in order; whitespace-only stretches are dropped.
std::vector<std::string_view> split_documents(std::string_view text, const DocumentRule& rule = {});

}  // namespace keel::data
