// BPE trainer timing benchmark (not a test): learns a vocabulary from text files and prints
// the time for counting pieces and for merging.
//
//   bench_bpe_trainer [--vocab-size N] [--out DIR] FILE...
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>

#include "core/io.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data/file_io.h"

int main(int argc, char** argv) {
  CLI::App app{"Time the byte-level BPE trainer"};
  std::vector<std::string> files;
  std::string out;
  int vocab_size = 10000;
  app.add_option("files", files, "text files (.txt, .xz, .gz)")->required();
  app.add_option("--vocab-size", vocab_size, "vocabulary size to learn");
  app.add_option("--out", out, "write encoder.json + vocab.bpe into this directory");
  CLI11_PARSE(app, argc, argv);
  try {
    using clock = std::chrono::steady_clock;
    auto secs = [](clock::time_point a) {
      return std::chrono::duration<double>(clock::now() - a).count();
    };
    const auto t0 = clock::now();
    keel::data::BpeTrainer trainer;
    size_t bytes = 0;
    for (const auto& f : files) {
      const std::string text = keel::data::read_text_file(f);
      bytes += text.size();
      trainer.add_text(text);
    }
    const double t_count = secs(t0);
    const auto t1 = clock::now();
    const auto vocab = trainer.train({.vocab_size = vocab_size, .on_progress = {}});
    const double t_train = secs(t1);
    fmt::print("{:.1f} MB of text, {} distinct pieces\n", bytes / 1e6, trainer.distinct_pieces());
    fmt::print("read + count: {:.2f} s; merges: {:.2f} s; total {:.2f} s for {} tokens ({} merges)\n",
               t_count, t_train, t_count + t_train, vocab.size(), vocab.merges.size());
    if (!out.empty()) {
      keel::io::create_directories(out, "bench_bpe_trainer");
      keel::data::save_vocab(vocab, out);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
