// Where the data files that ship with keel are found: GPT-2's vocabulary and the demo corpus.
//
// Lookup order, first existing wins:
//   1. $KEEL_DATA_DIR (a directory laid out like the source tree's data/)
//   2. <directory of the running binary>/../share/keel (what `cmake --install` lays out)
//   3. the source tree's data/ (compiled in as KEEL_DATA_SOURCE_DIR), for build-tree use
#pragma once

#include <filesystem>

namespace keel::data {

// The directory holding assets/gpt2/ and corpora/. IoError when none of the places exists.
std::filesystem::path data_root();
// data_root()/assets/gpt2: GPT-2's encoder.json + vocab.bpe.
std::filesystem::path default_vocab_dir();
// data_root()/corpora/austen_6novels.txt.xz: the bundled demo corpus.
std::filesystem::path bundled_corpus_path();

}  // namespace keel::data
