// Splitting corpus text into documents (the rule is described in documents.h).
#include "data/documents.h"

#include <algorithm>

namespace keel::data {

namespace {

bool is_break(char c) { return c == '\n' || c == '\r'; }

std::string_view trim_breaks(std::string_view s) {
  while (!s.empty() && is_break(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_break(s.back())) s.remove_suffix(1);
  return s;
}

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  });
}

bool blank_line(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Sections: cut at every run of two or more blank lines.
std::vector<std::string_view> sections(std::string_view t) {
  std::vector<std::string_view> out;
  size_t start = 0, run_start = 0, blanks = 0;
  for (size_t pos = 0; pos < t.size();) {
    size_t eol = t.find('\n', pos);
    if (eol == std::string_view::npos) eol = t.size();
    if (blank_line(t.substr(pos, eol - pos))) {
      if (blanks++ == 0) run_start = pos;
    } else {
      if (blanks >= 2) {
        out.push_back(t.substr(start, run_start - start));
        start = pos;
      }
      blanks = 0;
    }
    pos = eol + 1;
  }
  out.push_back(t.substr(start));
  return out;
}

// Largest cut <= limit that does not split a UTF-8 sequence.
size_t utf8_floor(std::string_view s, size_t limit) {
  while (limit > 0 && (static_cast<unsigned char>(s[limit]) & 0xC0) == 0x80) --limit;
  return limit;
}

}  // namespace

size_t document_cut(std::string_view doc, size_t max_chars) {
  std::string_view head = doc.substr(0, max_chars);
  size_t cut = head.rfind("\n\n");
  if (cut == std::string_view::npos || cut == 0) cut = head.rfind('\n');
  if (cut == std::string_view::npos || cut == 0) cut = utf8_floor(doc, max_chars);
  if (cut == 0) cut = max_chars;  // a single enormous code point run; cannot happen in UTF-8
  return cut;
}

void cut_document(std::string_view doc, size_t max_chars, std::vector<std::string_view>& out) {
  doc = trim_breaks(doc);
  while (doc.size() > max_chars) {
    const size_t cut = document_cut(doc, max_chars);
    if (auto piece = trim_breaks(doc.substr(0, cut)); !blank(piece)) out.push_back(piece);
    doc = trim_breaks(doc.substr(cut));
  }
  if (!blank(doc)) out.push_back(doc);
}

std::vector<std::string_view> split_documents(std::string_view text, const DocumentRule& rule) {
  std::vector<std::string_view> docs;
  const char* doc_begin = nullptr;
  const char* doc_end = nullptr;
  auto flush = [&] {
    if (doc_begin) cut_document({doc_begin, static_cast<size_t>(doc_end - doc_begin)},
                              std::max<size_t>(rule.max_chars, 1), docs);
    doc_begin = doc_end = nullptr;
  };
  for (std::string_view s : sections(text)) {
    s = trim_breaks(s);
    if (blank(s)) continue;
    if (!doc_begin) doc_begin = s.data();
    doc_end = s.data() + s.size();  // joined sections keep the text between them
    if (static_cast<size_t>(doc_end - doc_begin) >= rule.min_chars) flush();
  }
  flush();
  return docs;
}

}  // namespace keel::data
