// `gpt2 tokenize`: text on stdin -> JSON array of token ids on stdout, or back with --decode.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "apps/gpt2/cli/commands.h"
#include "core/io.h"
#include "core/error.h"
#include "data/assets.h"
#include "data/tokenizer/tokenizer.h"

namespace keel::app {

namespace {

// stdin is read whole (and its ids held too), so it is bounded: a pipe that never ends must not
// exhaust memory. Corpora of any size go through `gpt2 prepare`, which streams.
constexpr uint64_t kMaxStdinBytes = uint64_t{256} << 20;

std::string read_stdin() {
  return io::read_fd(0, "stdin", "tokenize", kMaxStdinBytes,
                     "tokenize reads at most 256 MB; for larger text use `gpt2 prepare --input -`, which streams");
}

std::vector<int32_t> parse_ids(const std::string& text) {
  nlohmann::json j;
  try {
    j = io::parse_json(text, "stdin", "tokenize --decode");
  } catch (const IoError& e) {
    throw ValueError("tokenize --decode", e.message(), "pass a JSON array of integers, e.g. [464, 2068]");
  }
  if (!j.is_array())
    throw ValueError("tokenize --decode", "stdin: expected a JSON array of token ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer() || (j[i].is_number_unsigned() && j[i].get<uint64_t>() > INT32_MAX) ||
        j[i].get<int64_t>() < INT32_MIN || j[i].get<int64_t>() > INT32_MAX)
      throw ValueError("tokenize --decode",
                       fmt::format("stdin: element {} ({}) is not a token id", i, io::quote_json(j[i])));
    ids.push_back(j[i].get<int32_t>());
  }
  return ids;
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto vocab = std::make_shared<std::string>();
  auto decode = std::make_shared<bool>(false);
  auto special = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Encode stdin (at most 256 MB) to a JSON array of token ids on stdout (or --decode the reverse)");
  cmd->add_option("--vocab", *vocab,
                  "vocabulary directory (encoder.json + vocab.bpe); default: GPT-2's bundled one");
  cmd->add_flag("--decode,-d", *decode, "read a JSON array of ids, write the text");
  cmd->add_flag("--allow-special", *special,
                "encode a literal <|endoftext|> in the text as the special token");
  cmd->callback([=] {
    auto tok = data::Tokenizer::from_dir(vocab->empty() ? data::default_vocab_dir()
                                                        : std::filesystem::path(*vocab));
    const std::string input = read_stdin();
    if (*decode) {
      const std::string text = tok.decode(parse_ids(input));
      std::fwrite(text.data(), 1, text.size(), stdout);
      return;
    }
    const auto ids = *special ? tok.encode_with_special(input) : tok.encode(input);
    fmt::print("[{}]\n", fmt::join(ids, ", "));
  });
}

}  // namespace keel::app
