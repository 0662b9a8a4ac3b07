// Dataset metadata and split streams (see dataset.h).
#include "data/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/io.h"
#include "data/token_files.h"

namespace keel::data {

namespace fs = std::filesystem;

namespace {

ShardReader open_foreign(const fs::path& file, DatasetFormat format) {
  return format == DatasetFormat::llmc ? open_llmc_file(file) : open_nanogpt_file(file);
}

// An llm.c or nanoGPT directory as keel sees it: GPT-2's vocabulary, files as shards. The
// token counts come from the file sizes; TokenSplit::open checks headers and ids.
DatasetMeta foreign_meta(const fs::path& dir, DatasetFormat format) {
  DatasetMeta m;
  m.format = format;
  m.vocab_size = kGpt2VocabSize;
  m.eot_id = static_cast<int32_t>(kGpt2VocabSize - 1);
  m.token_bytes = 2;
  for (auto [name, info] : {std::pair{"train", &m.train}, std::pair{"val", &m.val}})
    for (const auto& file : foreign_split_files(dir, format, name)) {
      info->shards.push_back(file.filename().string());
      const uint64_t bytes = fs::file_size(file);  // exact for a valid file; TokenSplit checks
      const uint64_t header = format == DatasetFormat::llmc ? kLlmcHeaderBytes : 0;
      info->tokens += bytes > header ? (bytes - header) / 2 : 0;
    }
  m.json = fmt::format("{{\"format\": \"{}\", \"vocab_size\": {}}}\n", format_name(format),
                       m.vocab_size);
  return m;
}

}  // namespace

DatasetMeta read_dataset_meta(const fs::path& dir) {
  const fs::path path = dir / "meta.json";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw IoError("read_dataset_meta", fmt::format("{}: dataset directory not found", dir.string()),
                  "create it with `gpt2 prepare --input FILE --out DIR`");
  if (const DatasetFormat format = detect_dataset_format(dir); format != DatasetFormat::keel)
    return foreign_meta(dir, format);
  const std::string text = io::read_file(path, "read_dataset_meta", io::kMaxJsonBytes);
  const auto j = io::parse_json(text, path.string(), "read_dataset_meta");
  const std::string hint = "re-run `gpt2 prepare` to regenerate the dataset";
  auto bad = [&](const std::string& msg) -> IoError {
    return IoError("read_dataset_meta", fmt::format("{}: {}", path.string(), msg), hint);
  };
  auto field = [&](const nlohmann::json& o, const char* key) -> const nlohmann::json& {
    if (!o.is_object() || !o.contains(key)) throw bad(fmt::format("no field \"{}\"", key));
    return o[key];
  };
  // Every integer is range-checked: 2^32 + 320 must not wrap to 320, nor 1e30 be cast.
  auto integer = [&](const nlohmann::json& o, const char* key, int64_t lo, int64_t hi) {
    try {
      return io::get_int(field(o, key), lo, hi, fmt::format("field \"{}\"", key));
    } catch (const ConfigError& e) {
      throw bad(e.message());
    }
  };
  const auto& format = field(j, "format");
  if (!format.is_string() || format.get<std::string>() != kDatasetFormat)
    throw bad(fmt::format("not a keel dataset (format {})", io::quote_json(format)));
  const int64_t version = integer(j, "version", 0, INT32_MAX);
  if (version != kDatasetVersion)
    throw IoError("read_dataset_meta",
                  fmt::format("{}: dataset version {} is not supported (this build reads {})", path.string(),
                              version, kDatasetVersion),
                  "re-run `gpt2 prepare`");
  DatasetMeta m;
  m.vocab_size = static_cast<uint32_t>(integer(j, "vocab_size", 1, UINT32_MAX));
  m.eot_id = static_cast<int32_t>(integer(j, "eot_id", -1, INT32_MAX));
  m.token_bytes = static_cast<uint32_t>(integer(j, "token_bytes", 1, 8));
  const auto& splits = field(j, "splits");
  for (auto [name, info] : {std::pair{"train", &m.train}, std::pair{"val", &m.val}}) {
    const auto& s = field(splits, name);
    const auto& shards = field(s, "shards");
    if (!shards.is_array()) throw bad(fmt::format("splits.{}.shards is not an array", name));
    for (const auto& f : shards) {
      if (!f.is_string()) throw bad(fmt::format("splits.{}.shards holds {}, not a file name", name, io::quote_json(f)));
      info->shards.push_back(f.get<std::string>());
    }
    info->tokens = static_cast<uint64_t>(integer(s, "tokens", 0, INT64_MAX));
    info->documents = static_cast<uint64_t>(integer(s, "documents", 0, INT64_MAX));
  }
  m.json = text;
  return m;
}

std::shared_ptr<const TokenSplit> TokenSplit::open(const fs::path& dir, const std::string& split,
                                                   uint32_t expected_vocab_size) {
  if (split != "train" && split != "val")
    throw ValueError("TokenSplit::open", fmt::format("unknown split \"{}\"", split),
                     "use \"train\" or \"val\"");
  const DatasetMeta meta = read_dataset_meta(dir);
  if (expected_vocab_size && meta.vocab_size != expected_vocab_size)
    throw ConfigError("TokenSplit::open",
                      fmt::format("{}: the dataset's vocabulary has {} tokens but {} were asked for",
                                  dir.string(), meta.vocab_size, expected_vocab_size),
                      "prepare the data with the model's vocabulary, or set the model's "
                      "vocab size to the dataset's");
  const SplitInfo& info = split == "train" ? meta.train : meta.val;
  std::shared_ptr<TokenSplit> s(new TokenSplit());
  s->vocab_size_ = meta.vocab_size;
  for (const auto& name : info.shards) {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      throw IoError("TokenSplit::open", fmt::format("{}: bad shard name \"{}\" in meta.json",
                                                    dir.string(), name));
    ShardReader r = meta.format == DatasetFormat::keel ? ShardReader(dir / name)
                                                       : open_foreign(dir / name, meta.format);
    if (r.header().vocab_size != meta.vocab_size)
      throw IoError("TokenSplit::open",
                    fmt::format("{}: vocab size {} disagrees with meta.json's {}",
                                r.path().string(), r.header().vocab_size, meta.vocab_size),
                    "re-run `gpt2 prepare`");
    s->starts_.push_back(s->total_);
    s->total_ += r.size();
    s->shards_.push_back(std::move(r));
  }
  if (s->total_ != info.tokens)
    throw IoError("TokenSplit::open",
                  fmt::format("{}: the {} shards hold {} tokens but meta.json says {}",
                              dir.string(), split, s->total_, info.tokens),
                  "re-run `gpt2 prepare`");
  return s;
}

std::shared_ptr<const TokenSplit> TokenSplit::from_tokens(std::vector<int32_t> tokens,
                                                          uint32_t vocab_size) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= vocab_size)
      throw ValueError("TokenSplit::from_tokens",
                       fmt::format("token {} at {} is outside [0, {})", tokens[i], i, vocab_size));
  std::shared_ptr<TokenSplit> s(new TokenSplit());
  s->vocab_size_ = vocab_size;
  s->total_ = tokens.size();
  s->memory_ = std::move(tokens);
  return s;
}

void TokenSplit::read(uint64_t pos, uint64_t n, int32_t* out) const {
  if (pos + n > total_ || pos + n < pos)
    throw IndexError("TokenSplit::read",
                     fmt::format("tokens [{}, {}) are outside the split of {}", pos, pos + n, total_));
  if (shards_.empty()) {
    std::copy_n(memory_.begin() + static_cast<ptrdiff_t>(pos), n, out);
    return;
  }
  // The shard holding pos, then onwards across boundaries.
  size_t k = std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin() - 1;
  while (n > 0) {
    const uint64_t local = pos - starts_[k];
    const uint64_t take = std::min<uint64_t>(n, shards_[k].size() - local);
    shards_[k].read(local, take, out);
    out += take, pos += take, n -= take;
    ++k;
  }
}

}  // namespace keel::data
