// Tokenizer throughput benchmark (not a test): encodes a corpus on one thread and prints MB/s.
//
//   bench_tokenizer [--vocab DIR] [--repeat N] [FILE]   (default: the bundled Austen corpus)
//
// Every repetition uses a fresh tokenizer, so the word cache starts cold each time; the
// number printed is the best of the repetitions.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>

#include "data/assets.h"
#include "data/file_io.h"
#include "data/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  CLI::App app{"Measure GPT-2 tokenizer throughput on one core"};
  std::string file, vocab_dir;
  int repeat = 3;
  app.add_option("file", file, "text file (.txt, .xz, .gz); default: bundled Austen corpus");
  app.add_option("--vocab", vocab_dir, "vocabulary directory (default: GPT-2's)");
  app.add_option("--repeat", repeat, "repetitions (best is reported)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    const std::filesystem::path path =
        file.empty() ? keel::data::bundled_corpus_path() : std::filesystem::path(file);
    const std::string text = keel::data::read_text_file(path);
    const auto vocab = keel::data::load_vocab(vocab_dir.empty() ? keel::data::default_vocab_dir()
                                                                : std::filesystem::path(vocab_dir));
    double best = 1e30;
    size_t n_tokens = 0;
    for (int r = 0; r < repeat; ++r) {
      keel::data::Tokenizer tok(vocab);
      const auto t0 = std::chrono::steady_clock::now();
      n_tokens = tok.encode(text).size();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
    }
    const double mb = text.size() / 1e6;
    fmt::print("{}: {:.1f} MB, {} tokens ({:.2f} bytes/token)\n", path.string(), mb, n_tokens,
               double(text.size()) / n_tokens);
    fmt::print("encode: {:.3f} s, {:.1f} MB/s, {:.2f} M tokens/s (best of {}, cold cache, 1 thread)\n",
               best, mb / best, n_tokens / best / 1e6, repeat);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
