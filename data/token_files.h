// Token files of other tools, read as keel datasets and written for them.
//
// llm.c (github.com/karpathy/llm.c, dev/data/data_common.py) shard, one file per shard:
//   offset  size   field (little-endian)
//        0  4      int32 magic 20240520 (GPT-2 tokens)
//        4  4      int32 version 1 (uint16 tokens)
//        8  4      int32 token count N
//       12  1012   the rest of a 256 x int32 header, zero
//     1024  2N     uint16 token ids
// llm.c names them PREFIX_train_000001.bin, PREFIX_val_000000.bin (or PREFIX_train.bin).
// (llm.c's Llama 3 variant, magic 20240801 version 7 with uint32 ids, is refused by name.)
//
// nanoGPT (github.com/karpathy/nanoGPT, data/*/prepare.py): DIR/train.bin and DIR/val.bin, raw
// uint16 ids with no header (numpy's tofile), so only the length (even) can be checked.
//
// Both tools store GPT-2 token ids, so a directory of their files opens as a dataset with
// GPT-2's vocabulary: 50257 ids, <|endoftext|> = 50256; every id is checked against it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "data/shard.h"

namespace keel::data {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr uint64_t kLlmcHeaderBytes = 256 * 4;
inline constexpr uint32_t kGpt2VocabSize = 50257;

enum class DatasetFormat { keel, llmc, nanogpt };
const char* format_name(DatasetFormat f);  // "keel", "llm.c", "nanoGPT"

// A dataset directory's format: keel (meta.json), nanoGPT (train.bin + val.bin) or llm.c
// (*train*.bin files with llm.c's magic). IoError naming what was looked for when none fits.
DatasetFormat detect_dataset_format(const std::filesystem::path& dir);

// The files of one split ("train" or "val") of an llm.c or nanoGPT directory, in stream order.
// IoError when the split has none.
std::vector<std::filesystem::path> foreign_split_files(const std::filesystem::path& dir,
                                                       DatasetFormat format,
                                                       const std::string& split);

// Open one file; the header (llm.c), the length and every id (< vocab_size) are checked, and
// each fault is an IoError naming the file and what is wrong.
ShardReader open_llmc_file(const std::filesystem::path& path, uint32_t vocab_size = kGpt2VocabSize);
ShardReader open_nanogpt_file(const std::filesystem::path& path, uint32_t vocab_size = kGpt2VocabSize);

// Writes tokens as an llm.c GPT-2 shard, atomically. ValueError for an id above 65535 (llm.c's
// files are uint16) or more than 2^31 - 1 tokens (its count is an int32).
void write_llmc_file(const std::filesystem::path& path, std::span<const uint32_t> tokens);

// Every shard of a keel dataset as llm.c files OUT/PREFIX_{train,val}_NNNNNN.bin (one per keel
// shard, same order). Returns the files written. ConfigError when the vocabulary needs more
// than 16 bits.
std::vector<std::filesystem::path> export_llmc(const std::filesystem::path& dataset,
                                               const std::filesystem::path& out,
                                               const std::string& prefix);

}  // namespace keel::data
