// llm.c and nanoGPT token files (formats in token_files.h).
#include "data/token_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "data/dataset.h"
#include "core/io.h"
#include "data/file_io.h"

namespace keel::data {

namespace fs = std::filesystem;

namespace {

constexpr int32_t kLlama3Magic = 20240801;

// PREFIX_train_000001.bin, PREFIX_train.bin, train.bin...: a .bin whose name has the split
// as a word of its own (so "val" does not match "interval_...").
bool names_split(const std::string& name, const std::string& split) {
  if (!name.ends_with(".bin")) return false;
  const std::string stem = name.substr(0, name.size() - 4);
  for (size_t at = stem.find(split); at != std::string::npos; at = stem.find(split, at + 1)) {
    const size_t end = at + split.size();
    const bool left = at == 0 || stem[at - 1] == '_' || stem[at - 1] == '-' || stem[at - 1] == '.';
    const bool right = end == stem.size() || stem[end] == '_' || stem[end] == '-' || stem[end] == '.';
    if (left && right) return true;
  }
  return false;
}

std::vector<fs::path> bin_files_for(const fs::path& dir, const std::string& split) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && names_split(e.path().filename().string(), split))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

bool has_llmc_magic(const fs::path& p) {
  int32_t magic = 0;
  std::ifstream f(p, std::ios::binary);
  return f.read(reinterpret_cast<char*>(&magic), 4) && magic == kLlmcMagic;
}

}  // namespace

const char* format_name(DatasetFormat f) {
  switch (f) {
    case DatasetFormat::keel: return "keel";
    case DatasetFormat::llmc: return "llm.c";
    case DatasetFormat::nanogpt: return "nanoGPT";
  }
  return "?";
}

DatasetFormat detect_dataset_format(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw IoError("dataset", fmt::format("{}: dataset directory not found", dir.string()),
                  "create it with `gpt2 prepare --input FILE --out DIR`");
  if (fs::exists(dir / "meta.json", ec)) return DatasetFormat::keel;
  if (fs::is_regular_file(dir / "train.bin", ec) && fs::is_regular_file(dir / "val.bin", ec) &&
      !has_llmc_magic(dir / "train.bin"))
    return DatasetFormat::nanogpt;
  const auto train = bin_files_for(dir, "train");
  if (!train.empty() && has_llmc_magic(train.front())) return DatasetFormat::llmc;
  throw IoError("dataset",
                fmt::format("{}: not a dataset: meta.json not found (keel), nor train.bin + "
                            "val.bin (nanoGPT), nor *_train_*.bin starting with llm.c's magic {}",
                            dir.string(), kLlmcMagic),
                "create one with `gpt2 prepare --input FILE --out DIR`");
}

std::vector<fs::path> foreign_split_files(const fs::path& dir, DatasetFormat format,
                                          const std::string& split) {
  if (format == DatasetFormat::nanogpt) return {dir / (split + ".bin")};
  auto files = bin_files_for(dir, split);
  if (files.empty())
    throw IoError("dataset", fmt::format("{}: no llm.c {} files (*_{}_*.bin)", dir.string(), split,
                                         split),
                  "an llm.c dataset needs both train and val shards");
  return files;
}

ShardReader open_llmc_file(const fs::path& path, uint32_t vocab_size) {
  int32_t header[3] = {};
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError("llm.c file", fmt::format("{}: cannot open", path.string()));
  if (!f.read(reinterpret_cast<char*>(header), sizeof header))
    throw IoError("llm.c file", fmt::format("{}: truncated: shorter than the header", path.string()),
                  "an llm.c shard starts with a 1024-byte header");
  const std::string hint = "regenerate it with llm.c's dev/data scripts (GPT-2 tokens)";
  if (header[0] == kLlama3Magic)
    throw IoError("llm.c file", fmt::format("{}: an llm.c Llama 3 file (magic {}, uint32 tokens); "
                                            "keel reads llm.c's GPT-2 files only", path.string(),
                                            kLlama3Magic), hint);
  if (header[0] != kLlmcMagic)
    throw IoError("llm.c file", fmt::format("{}: bad header: magic {} is not llm.c's {}",
                                            path.string(), header[0], kLlmcMagic), hint);
  if (header[1] != kLlmcVersion)
    throw IoError("llm.c file", fmt::format("{}: bad header: version {} is not supported (keel reads "
                                            "version {}, uint16 tokens)", path.string(), header[1],
                                            kLlmcVersion), hint);
  if (header[2] <= 0)
    throw IoError("llm.c file", fmt::format("{}: bad header: token count {}", path.string(),
                                            header[2]), hint);
  return ShardReader(path, {.header_bytes = kLlmcHeaderBytes, .token_bytes = 2,
                            .vocab_size = vocab_size, .num_tokens = uint64_t(header[2])});
}

ShardReader open_nanogpt_file(const fs::path& path, uint32_t vocab_size) {
  return ShardReader(path, {.header_bytes = 0, .token_bytes = 2, .vocab_size = vocab_size,
                            .num_tokens = 0});
}

void write_llmc_file(const fs::path& path, std::span<const uint32_t> tokens) {
  if (tokens.size() > uint64_t(INT32_MAX))
    throw ValueError("write_llmc_file", fmt::format("{}: {} tokens do not fit llm.c's int32 count",
                                                    path.string(), tokens.size()),
                     "use smaller shards (--shard-tokens)");
  std::string buf(kLlmcHeaderBytes + 2 * tokens.size(), '\0');
  const int32_t header[3] = {kLlmcMagic, kLlmcVersion, static_cast<int32_t>(tokens.size())};
  std::memcpy(buf.data(), header, sizeof header);  // hosts are little-endian, as the format
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] > 0xFFFF)
      throw ValueError("write_llmc_file", fmt::format("{}: token {} at {} does not fit uint16",
                                                      path.string(), tokens[i], i));
    const auto v = static_cast<uint16_t>(tokens[i]);
    std::memcpy(buf.data() + kLlmcHeaderBytes + 2 * i, &v, 2);
  }
  io::write_file_atomic(path, buf, "write_llmc_file");
}

std::vector<fs::path> export_llmc(const fs::path& dataset, const fs::path& out,
                                  const std::string& prefix) {
  const DatasetMeta meta = read_dataset_meta(dataset);
  if (meta.vocab_size > 65536)
    throw ConfigError("export_llmc", fmt::format("{}: vocabulary of {} ids needs more than llm.c's "
                                                 "16-bit tokens", dataset.string(), meta.vocab_size));
  if (prefix.empty() || prefix.find('/') != std::string::npos)
    throw ValueError("export_llmc", fmt::format("bad file name prefix \"{}\"", prefix),
                     "use a plain name such as the corpus's, e.g. --prefix austen");
  io::create_directories(out, "export_llmc");
  std::vector<fs::path> written;
  for (const auto& [split, info] : {std::pair{"train", &meta.train}, std::pair{"val", &meta.val}}) {
    for (size_t k = 0; k < info->shards.size(); ++k) {
      const ShardReader shard(dataset / info->shards[k]);
      std::vector<int32_t> ids(shard.size());
      shard.read(0, ids.size(), ids.data());
      const std::vector<uint32_t> tokens(ids.begin(), ids.end());
      const fs::path file = out / fmt::format("{}_{}_{:06d}.bin", prefix, split, k);
      write_llmc_file(file, tokens);
      written.push_back(file);
    }
  }
  return written;
}

}  // namespace keel::data
