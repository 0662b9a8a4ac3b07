// Streaming documents out of (compressed) text and JSON Lines files (see doc_stream.h).
#include "data/doc_stream.h"

#include <fmt/format.h>
#include <lzma.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <deque>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/io.h"

namespace keel::data {

namespace fs = std::filesystem;

namespace {

constexpr size_t kChunk = 1 << 20;  // bytes read per refill

bool ends_with(const std::string& s, const char* tail) { return s.ends_with(tail); }

// Bytes of one input, decompressed: .xz through liblzma, everything else through zlib's
// gzread, which passes plain text through unchanged and also reads gzip on stdin.
class ByteSource {
 public:
  explicit ByteSource(const InputFile& in) : name_(in.is_stdin() ? "stdin" : in.path.string()) {
    std::error_code ec;
    if (!in.is_stdin()) {
      if (!fs::exists(in.path, ec))
        throw IoError("prepare", fmt::format("{}: file not found", name_), "check the --input path");
      if (fs::is_directory(in.path, ec))
        throw IoError("prepare", fmt::format("{}: is a directory", name_));
    }
    try {
      open(in);
    } catch (...) {
      release();  // a constructor that throws runs no destructor
      throw;
    }
  }

  ~ByteSource() { release(); }

 private:
  void open(const InputFile& in) {
    // A FIFO (or device) given as a file would block the open, and then the run, forever.
    const int fd = in.is_stdin() ? dup(0) : io::open_regular_file(in.path, "prepare");
    if (!in.is_stdin() && ends_with(in.path.string(), ".xz")) {
      file_ = fdopen(fd, "rb");
      if (!file_) {
        const int e = errno;
        if (fd >= 0) close(fd);
        fail(std::strerror(e));
      }
      if (lzma_stream_decoder(&xz_, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK)
        fail("cannot start the xz decoder");
      xz_in_.resize(kChunk);
      is_xz_ = true;
    } else {
      gz_ = gzdopen(fd, "rb");
      if (!gz_) {
        const int e = errno;
        if (fd >= 0) close(fd);
        fail(std::strerror(e));
      }
      gzbuffer(gz_, 1 << 18);
      // gzread passes data without the gzip magic bytes through as plain text: right for a .txt
      // or stdin, but a .gz with a damaged header would feed binary garbage into the dataset.
      if (!in.is_stdin() && ends_with(in.path.string(), ".gz") && gzdirect(gz_) == 1)
        fail("not gzip data (the first two bytes are not 1f 8b)",
             "check the file with `gzip -t`, or drop the .gz suffix if it is plain text");
    }
  }

  void release() {
    if (is_xz_) lzma_end(&xz_);
    is_xz_ = false;
    if (file_) std::fclose(file_);
    file_ = nullptr;
    if (gz_) gzclose(gz_);
    gz_ = nullptr;
  }

 public:
  // Up to n bytes into out; 0 at the end.
  size_t read(char* out, size_t n) {
    if (!is_xz_) {
      const int got = gzread(gz_, out, static_cast<unsigned>(n));
      int err = Z_OK;
      const char* msg = gzerror(gz_, &err);
      if (got < 0 || (err != Z_OK && err != Z_BUF_ERROR))
        fail(fmt::format("corrupt or truncated gzip data ({})", msg ? msg : "?"), "check it with `gzip -t`");
      if (got == 0 && err == Z_BUF_ERROR)
        fail("corrupt or truncated gzip data (unexpected end)", "check it with `gzip -t`");
      consumed_ = static_cast<uint64_t>(std::max<long>(0, gzoffset(gz_)));
      return static_cast<size_t>(got);
    }
    xz_.next_out = reinterpret_cast<uint8_t*>(out);
    xz_.avail_out = n;
    while (xz_.avail_out == n && !xz_done_) {
      if (xz_.avail_in == 0 && !eof_) {
        xz_.avail_in = std::fread(xz_in_.data(), 1, xz_in_.size(), file_);
        xz_.next_in = reinterpret_cast<const uint8_t*>(xz_in_.data());
        consumed_ += xz_.avail_in;
        if (std::ferror(file_)) fail(std::strerror(errno));
        eof_ = std::feof(file_);
      }
      const lzma_ret r = lzma_code(&xz_, eof_ && xz_.avail_in == 0 ? LZMA_FINISH : LZMA_RUN);
      if (r == LZMA_STREAM_END) xz_done_ = true;
      else if (r != LZMA_OK)
        fail(fmt::format("corrupt or truncated xz data (liblzma error {})", int(r)),
             "re-download the file or check it with `xz -t`");
    }
    return n - xz_.avail_out;
  }
  uint64_t consumed() const { return consumed_; }
  const std::string& name() const { return name_; }

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& hint = {}) const {
    throw IoError("prepare", fmt::format("{}: {}", name_, what), hint);
  }
  std::string name_;
  FILE* file_ = nullptr;
  gzFile gz_ = nullptr;
  bool is_xz_ = false, eof_ = false, xz_done_ = false;
  lzma_stream xz_ = LZMA_STREAM_INIT;
  std::string xz_in_;
  uint64_t consumed_ = 0;
};

bool is_break(char c) { return c == '\n' || c == '\r'; }
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool blank_line(std::string_view line) {  // documents.cpp's notion: only ' ', '\t', '\r'
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\r') return false;
  return true;
}
bool has_text(std::string_view s) {
  for (char c : s)
    if (!is_space(c)) return true;
  return false;
}

constexpr uint64_t kNone = UINT64_MAX;

}  // namespace

// The splitter keeps only the text it may still need: the open document (or, once it is longer
// than max_chars, its uncut rest) and the current section. Positions are absolute offsets in
// the decompressed stream; buf_ holds [base_, base_ + buf_.size()).
struct DocumentStream::Impl {
  InputFile input;
  DocumentRule rule;
  std::string field;
  ByteSource src;
  std::string buf_;
  uint64_t base_ = 0, pos_ = 0;  // pos_: start of the next unscanned line
  bool eof_ = false, finished_ = false, saw_text_ = false, saw_bytes_ = false;
  uint64_t line_no_ = 0;
  std::deque<std::string> ready_;

  // Text state (documents.h's sections and joining, incrementally).
  uint64_t sec_start_ = 0, run_start_ = 0, blanks_ = 0;
  uint64_t sec_first_ = kNone;  // first non-break byte of the current section
  uint64_t nonblank_end_ = 0;   // end (breaks trimmed) of the last non-blank line
  uint64_t any_end_ = 0;        // end of the last non-break byte
  bool sec_has_text_ = false;
  uint64_t doc_begin_ = kNone, doc_end_ = 0, head_ = kNone;

  uint64_t max_held_;

  Impl(InputFile in, DocumentRule r, std::string f, uint64_t max_held)
      : input(std::move(in)), rule(r), field(std::move(f)), src(input), max_held_(max_held) {
    rule.max_chars = std::max<size_t>(rule.max_chars, 1);
  }

  std::string_view view(uint64_t a, uint64_t b) const { return {buf_.data() + (a - base_), b - a}; }

  void emit_cut(std::string_view doc) {
    std::vector<std::string_view> pieces;
    cut_document(doc, rule.max_chars, pieces);
    for (auto p : pieces) ready_.emplace_back(p);
  }

  // --- plain text -------------------------------------------------------------------------
  void flush_doc() {
    if (doc_begin_ != kNone) emit_cut(view(head_ != kNone ? head_ : doc_begin_, doc_end_));
    doc_begin_ = head_ = kNone;
  }
  void end_section(uint64_t end) {
    if (sec_has_text_) {
      saw_text_ = true;
      if (doc_begin_ == kNone) doc_begin_ = sec_first_;
      doc_end_ = end;
      if (doc_end_ - doc_begin_ >= rule.min_chars) flush_doc();
    }
    sec_first_ = kNone;
    sec_has_text_ = false;
  }
  // Rule 3 ahead of time: once the open document's final text is known to run past max_chars,
  // its first piece is final too (a cut looks only at the first max_chars bytes).
  void cut_ahead() {
    uint64_t begin = head_ != kNone ? head_ : doc_begin_;
    if (begin == kNone) {
      if (!sec_has_text_) return;
      begin = sec_first_;
    }
    while (nonblank_end_ > begin && nonblank_end_ - begin > rule.max_chars + 2) {
      const std::string_view doc = view(begin, nonblank_end_);
      const size_t cut = document_cut(doc, rule.max_chars);
      std::vector<std::string_view> piece;
      cut_document(doc.substr(0, cut), rule.max_chars, piece);
      for (auto p : piece) ready_.emplace_back(p);
      if (doc_begin_ == kNone) doc_begin_ = begin;
      begin += cut;
      while (begin < nonblank_end_ && is_break(buf_[begin - base_])) ++begin;
      head_ = begin;
    }
  }
  void scan_text_line(uint64_t a, uint64_t b) {
    const std::string_view line = view(a, b);
    if (sec_first_ == kNone)
      for (size_t i = 0; i < line.size(); ++i)
        if (!is_break(line[i])) {
          sec_first_ = a + i;
          break;
        }
    size_t e = line.size();
    while (e > 0 && is_break(line[e - 1])) --e;
    if (e > 0) any_end_ = a + e;
    if (blank_line(line)) {
      if (blanks_++ == 0) run_start_ = a;
      return;
    }
    if (blanks_ >= 2) {
      end_section(nonblank_end_);
      sec_start_ = a;
      sec_first_ = kNone;
      for (size_t i = 0; i < line.size(); ++i)
        if (!is_break(line[i])) {
          sec_first_ = a + i;
          break;
        }
    }
    blanks_ = 0;
    nonblank_end_ = a + e;
    sec_has_text_ = sec_has_text_ || has_text(line);
  }

  // --- JSON Lines ---------------------------------------------------------------------------
  void scan_json_line(uint64_t a, uint64_t b) {
    const std::string_view line = view(a, b);
    if (!has_text(line)) return;
    const std::string where = fmt::format("{}:{}", src.name(), line_no_);
    const std::string hint = "fix or drop that record (one JSON object per line)";
    nlohmann::json j;
    // Bounded like every JSON keel reads (core/io.h); the library's own messages quote the raw
    // record, so they are replaced by ours.
    try {
      j = nlohmann::json::parse(line, io::json_depth_limit());
    } catch (const io::JsonTooDeep&) {
      throw IoError("prepare", fmt::format("{}: JSON nested deeper than {} levels", where, io::kMaxJsonDepth), hint);
    } catch (const nlohmann::json::parse_error& e) {
      const bool utf8 = std::string_view(e.what()).find("UTF-8") != std::string_view::npos;
      throw IoError("prepare", fmt::format("{}: {} near byte {}", where, utf8 ? "invalid UTF-8" : "not valid JSON",
                                           e.byte), hint);
    } catch (const nlohmann::json::exception&) {  // e.g. a number too large for a double (1e999)
      throw IoError("prepare", fmt::format("{}: not valid JSON (a number out of range?)", where), hint);
    }
    if (!j.is_object())
      throw IoError("prepare", fmt::format("{}: not a JSON object", where), hint);
    const auto it = j.find(field);
    if (it == j.end())
      throw IoError("prepare", fmt::format("{}: no \"{}\" field", where, field),
                    "name the text field with --text-field");
    if (!it->is_string())
      throw IoError("prepare", fmt::format("{}: field \"{}\" is {}, not a string", where, field,
                                           it->type_name()), hint);
    const std::string& text = it->get_ref<const std::string&>();
    if (has_text(text)) {
      saw_text_ = true;
      emit_cut(text);
    }
  }

  // Scans every complete line (all of it at the end) and drops text no longer needed.
  void scan() {
    while (pos_ < base_ + buf_.size()) {
      const size_t nl = buf_.find('\n', pos_ - base_);
      if (nl == std::string::npos && !eof_) break;
      const uint64_t eol = nl == std::string::npos ? base_ + buf_.size() : base_ + nl;
      ++line_no_;
      if (input.format == InputFormat::jsonl) scan_json_line(pos_, eol);
      else scan_text_line(pos_, eol);
      pos_ = eol + 1;
    }
    if (input.format == InputFormat::text) {
      if (eof_) {
        end_section(any_end_);
        flush_doc();
      } else {
        cut_ahead();
      }
    }
    uint64_t keep = std::min<uint64_t>(pos_, base_ + buf_.size());
    if (input.format == InputFormat::text) {
      if (head_ != kNone) keep = std::min(keep, head_);
      else if (doc_begin_ != kNone) keep = std::min(keep, doc_begin_);
      // Once the document has been cut (head_), the start of its section is no longer read:
      // keeping it would hold a whole section (a book without double blank lines) in memory.
      if (sec_first_ != kNone && head_ == kNone) keep = std::min(keep, sec_first_);
    }
    buf_.erase(0, keep - base_);
    base_ = keep;
  }

  // What scan() could not let go of is one line (or record) without its end, or, in plain
  // text, the open document followed by blank lines: nothing else stays unbounded.
  [[noreturn]] void too_much_held() const {
    const uint64_t pending = base_ + buf_.size() - pos_;  // the line not yet ended
    const std::string hint = fmt::format(
        "prepare holds at most {} bytes of one document (a quarter of --memory-mb): break the text "
        "into lines, or raise --memory-mb", max_held_);
    if (pending * 2 >= buf_.size())
      throw IoError("prepare", fmt::format("{}:{}: a {} of more than {} bytes", src.name(), line_no_ + 1,
                                           input.format == InputFormat::jsonl ? "record" : "line", pending),
                    hint);
    throw IoError("prepare", fmt::format("{}:{}: more than {} bytes of blank lines in a row", src.name(),
                                         line_no_, buf_.size() - pending), hint);
  }

  bool next(std::string& doc) {
    while (ready_.empty() && !finished_) {
      if (eof_) {
        finished_ = true;
        if (!saw_text_)
          throw IoError("prepare", fmt::format("{}: is empty (no text{})", src.name(),
                                               saw_bytes_ ? ", only whitespace" : ""),
                        "remove it from --input or check that it was written completely");
        break;
      }
      const size_t old = buf_.size();
      buf_.resize(old + kChunk);
      const size_t got = src.read(buf_.data() + old, kChunk);
      buf_.resize(old + got);
      if (got > 0) saw_bytes_ = true;
      eof_ = got == 0;
      scan();
      if (buf_.size() > max_held_) too_much_held();
    }
    if (ready_.empty()) return false;
    doc = std::move(ready_.front());
    ready_.pop_front();
    return true;
  }
};

DocumentStream::DocumentStream(InputFile input, DocumentRule rule, std::string text_field, uint64_t max_held_bytes)
    : impl_(std::make_unique<Impl>(std::move(input), rule, std::move(text_field), max_held_bytes)) {}
DocumentStream::~DocumentStream() = default;
bool DocumentStream::next(std::string& doc) { return impl_->next(doc); }
uint64_t DocumentStream::bytes_read() const { return impl_->src.consumed(); }

}  // namespace keel::data
