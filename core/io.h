// Reading and writing files safely, for every layer: whole-file reads that open only regular
// files (a FIFO or a device would block forever) and refuse files over a size limit; writes that
// readers see whole or not at all, even across a crash; a staging directory that replaces another
// only once it is complete; and a JSON parser that hostile input cannot drive off a cliff (a
// nesting limit, a size limit, messages naming the file and quoting only a bounded prefix).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace keel::io {

// Files keel reads whole (configs, metadata, vocabularies, corpora) stay far below this; a larger
// one is a mistake (a wrong path) and would only exhaust memory.
constexpr uint64_t kMaxFileBytes = uint64_t{16} << 30;
// JSON nesting deeper than this is hostile: no keel file nests more than a few levels.
constexpr int kMaxJsonDepth = 64;
// JSON larger than this is hostile too (encoder.json, the largest, is about 1 MB).
constexpr uint64_t kMaxJsonBytes = uint64_t{256} << 20;

// IoError naming `op` and the file unless `path` exists and is a regular file (after symlinks).
void require_regular_file(const std::filesystem::path& path, const char* op);

// A read-only descriptor (close-on-exec, blocking) of a regular file, for readers that stream it
// (zlib, liblzma); IoError naming `op` and the file otherwise. Opened with O_NONBLOCK and checked
// again after opening, so a FIFO swapped in after the check cannot block the open. The caller
// owns the descriptor.
int open_regular_file(const std::filesystem::path& path, const char* op);

// The bytes of a regular file of at most max_bytes; IoError naming `op` and the file otherwise.
// The file is opened with O_NONBLOCK and checked again after opening, so a FIFO swapped in
// between the check and the open cannot block the read.
std::string read_file(const std::filesystem::path& path, const char* op,
                      uint64_t max_bytes = kMaxFileBytes);

// Everything readable from the descriptor fd (stdin, a pipe) up to its end, at most max_bytes:
// IoError naming `source` (e.g. "stdin") and the limit, with `hint`, as soon as more arrives,
// so a stream that never ends cannot exhaust memory.
std::string read_fd(int fd, const std::string& source, const char* op, uint64_t max_bytes, const std::string& hint);

// Writes a file so that readers see the old version or the complete new one, never half of it,
// even across a crash: the bytes go to a temporary name beside the target, are fsync'd, and
// the temporary is renamed over the target (then the directory is fsync'd). If commit() is never
// reached (an exception), the destructor removes the temporary and the target is untouched.
// The target's missing parent directories are created first, so every output file keel writes
// (`--out a/b/map.svg`) behaves like its output directories.
class AtomicWriter {
 public:
  AtomicWriter(std::filesystem::path target, const char* op);
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  void commit();

 private:
  std::filesystem::path target_, tmp_;
  const char* op_;
  int fd_ = -1;
  bool committed_ = false;
};

void write_file_atomic(const std::filesystem::path& path, std::string_view data, const char* op);

// Creates directory `dir` and its missing parents (nothing if it is one already). IoError naming
// `op` and `dir` when that fails, with the reason: the part of the path that is a file rather
// than a directory (`--run-dir somefile/run`), or the system's (permissions, a full disk). Every
// output directory is made here, so no raw std::filesystem message reaches a user.
void create_directories(const std::filesystem::path& dir, const char* op);

// The filesystem operations of keel's outputs (checkpoints, run and dataset directories), each an
// IoError naming `op`, the path(s) and the system's reason when it fails (a read-only directory,
// a full disk), never a raw std::filesystem message:
//   rename: `from` becomes `to` (atomically within one filesystem; an empty directory `to` is
//     replaced);
//   remove_all: `path` and everything under it (nothing when it does not exist);
//   list_directory: the entries of `dir`, in no particular order.
void rename(const std::filesystem::path& from, const std::filesystem::path& to, const char* op);
void remove_all(const std::filesystem::path& path, const char* op);
std::vector<std::filesystem::path> list_directory(const std::filesystem::path& dir, const char* op);

// Makes renames inside `dir` durable (best effort: some filesystems refuse to sync a directory).
void fsync_dir(const std::filesystem::path& dir);

// A staging directory next to `target` (same filesystem). commit() swaps it into place
// (atomically when the filesystem supports RENAME_EXCHANGE) and deletes the old contents; if
// commit() is never reached (an exception), the destructor deletes the staging directory and
// `target` is untouched.
//
// resumable: the staging directory is TARGET.partial and what an earlier, interrupted run left
// in it is kept (the caller decides whether it can be reused); it is still deleted on an error.
class StagingDir {
 public:
  StagingDir(std::filesystem::path target, const char* op, bool resumable = false);
  ~StagingDir();
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::filesystem::path& path() const { return staging_; }
  void commit();

 private:
  std::filesystem::path target_, staging_;
  const char* op_;
  bool committed_ = false;
};

// An untrusted string cut to max_chars, with control bytes and quotes escaped.
std::string quote(std::string_view s, size_t max_chars = 40);

[[noreturn]] void throw_json_too_large(const std::string& source, const char* op, uint64_t size);
[[noreturn]] void throw_json_too_deep(const std::string& source, const char* op, int max_depth);
[[noreturn]] void throw_json_malformed(const std::string& source, const char* op, size_t byte);
[[noreturn]] void throw_int_out_of_range(const std::string& what, const std::string& got, int64_t lo, int64_t hi);

// Parses JSON text read from `source` (a file name, "stdin", "--config") into J (nlohmann::json
// or ordered_json). IoError naming the source, never a raw library message, when the text is
// malformed, larger than kMaxJsonBytes or nested deeper than max_depth. The parser itself is
// iterative; the limit protects everything that walks the result recursively afterwards (dump,
// copy, comparison, destruction).
struct JsonTooDeep {};

// A parser callback that throws JsonTooDeep before the parser builds a tree deeper than
// max_depth (the callback sees the depth of every value as it is parsed).
template <typename J = nlohmann::json>
typename J::parser_callback_t json_depth_limit(int max_depth = kMaxJsonDepth) {
  return [max_depth](int depth, typename J::parse_event_t event, J&) {
    if ((event == J::parse_event_t::object_start || event == J::parse_event_t::array_start) && depth >= max_depth)
      throw JsonTooDeep{};
    return true;
  };
}

template <typename J = nlohmann::json>
J parse_json(std::string_view text, const std::string& source, const char* op, int max_depth = kMaxJsonDepth) {
  if (text.size() > kMaxJsonBytes) throw_json_too_large(source, op, text.size());
  try {
    return J::parse(text.begin(), text.end(), json_depth_limit<J>(max_depth));
  } catch (const JsonTooDeep&) {
    throw_json_too_deep(source, op, max_depth);
  } catch (const typename J::parse_error& e) {
    throw_json_malformed(source, op, e.byte);  // its own message quotes raw input
  } catch (const typename J::exception&) {  // e.g. a number too large for a double (1e999)
    throw_json_malformed(source, op, 0);
  }
}

// read_file + parse_json.
nlohmann::json read_json_file(const std::filesystem::path& path, const char* op, int max_depth = kMaxJsonDepth);

// A short, safe description of an untrusted JSON value for an error message: a scalar as JSON
// cut to max_chars, an array or object by its size only (never dumped: that would recurse).
template <typename J>
std::string quote_json(const J& v, size_t max_chars = 40) {
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + " elements";
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " keys";
  if (v.is_string()) return quote(std::string_view(v.template get_ref<const std::string&>()), max_chars);
  std::string s = v.dump();  // a scalar: no recursion
  if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
  return s;
}

// An integer JSON value in [lo, hi]. ConfigError naming `what` (e.g. "meta.json: field
// 'vocab_size'") when it is not an integer (1e30, 2.5, "7") or out of range, so no value wraps
// and no float is ever converted to an integer out of range.
template <typename J>
int64_t get_int(const J& v, int64_t lo, int64_t hi, const std::string& what) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.template get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) throw_int_out_of_range(what, std::to_string(u), lo, hi);
    if (static_cast<int64_t>(u) < lo) throw_int_out_of_range(what, std::to_string(u), lo, hi);
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) throw_int_out_of_range(what, quote_json(v), lo, hi);
  const int64_t x = v.template get<int64_t>();
  if (x < lo || x > hi) throw_int_out_of_range(what, std::to_string(x), lo, hi);
  return x;
}

// Parses decimal digits (an optional leading '-') into [lo, hi]; false on anything else,
// including overflow.
bool parse_int(std::string_view s, int64_t lo, int64_t hi, int64_t& out);

}  // namespace keel::io
