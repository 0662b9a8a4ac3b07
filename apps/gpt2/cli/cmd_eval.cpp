// `gpt2 eval`: loss and perplexity of a trained run or a Hugging Face GPT-2 directory, on a
// dataset split, a text file or a JSON file of token ids.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "apps/gpt2/cli/commands.h"
#include "apps/gpt2/infer/eval.h"
#include "apps/gpt2/infer/run_model.h"
#include "apps/gpt2/run/metrics.h"
#include "apps/gpt2/run/placement.h"
#include "apps/gpt2/train/trainer.h"
#include "core/io.h"
#include "data/assets.h"
#include "data/file_io.h"
#include "data/tokenizer/tokenizer.h"
#include "nn/hf.h"

namespace fs = std::filesystem;

namespace keel::app {

namespace {
struct EvalArgs {
  std::string run_dir, init_from, data, split = "val", text, tokens, vocab, device = "auto";
  int64_t batch_size = 8, seq_len = 0, max_batches = 0;
  bool json = false;
};

std::vector<int32_t> read_token_file(const std::string& path) {
  const nlohmann::json j = io::read_json_file(path, "eval --tokens");
  if (!j.is_array()) throw IoError("eval", path + ": expected a JSON array of token ids");
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    // Range-checked: 4294967301 must not wrap to 5.
    try {
      ids.push_back(static_cast<int32_t>(io::get_int(v, 0, INT32_MAX, "element " + std::to_string(ids.size()))));
    } catch (const ConfigError& e) {
      throw IoError("eval --tokens", path + ": " + e.message() + " (a token id)", "pass a JSON array of token ids");
    }
  }
  return ids;
}

void run_eval(const EvalArgs& a) {
  if ((!a.data.empty()) + (!a.text.empty()) + (!a.tokens.empty()) != 1)
    throw ConfigError("eval", "give exactly one input: --data DIR, --text FILE or --tokens FILE");
  std::unique_ptr<nn::GPT2> model = load_model(a.run_dir, a.init_from, "eval");
  const auto& m = model->config();
  Device device = resolve_device(a.device);
  model->to(device);

  std::shared_ptr<const data::TokenSplit> split;
  if (!a.data.empty()) {
    split = data::TokenSplit::open(a.data, a.split, uint32_t(m.vocab_size));
  } else {
    std::vector<int32_t> ids;
    if (!a.tokens.empty()) {
      ids = read_token_file(a.tokens);
    } else {
      data::Tokenizer tok = data::Tokenizer::from_dir(vocab_dir_for(a.vocab, a.run_dir));
      ids = tok.encode(data::read_text_file(a.text));
    }
    for (int32_t id : ids)
      if (id < 0 || id >= m.vocab_size)
        throw ConfigError("eval", fmt::format("token id {} is outside the model's vocabulary of {}", id, m.vocab_size),
                          "tokenize with the model's vocabulary");
    split = data::TokenSplit::from_tokens(std::move(ids), uint32_t(m.vocab_size));
  }
  const int64_t T = a.seq_len ? a.seq_len : m.block_size;
  if (T > m.block_size)
    throw ConfigError("eval", fmt::format("--seq-len {} is longer than the model's context {}", T, m.block_size));
  EvalResult r = evaluate(*model, split, a.batch_size, T, a.max_batches, device);
  const std::vector<float>&ml = r.max_logit.values(), &mr = r.max_range.values();
  if (a.json) {
    // json_number(): a NaN loss or max logit prints as "nan" (as in metrics.jsonl), never as null.
    nlohmann::ordered_json out{{"loss", json_number(r.loss)},
                               {"perplexity", json_number(r.perplexity)},
                               {"tokens", r.tokens},
                               {"max_logit", logits_json(r.max_logit.rows())},
                               {"max_range", logits_json(r.max_range.rows())}};
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("loss {:.4f}  perplexity {:.3f}  over {} tokens\n", r.loss, r.perplexity, r.tokens);
    for (int64_t l = 0; l < m.n_layer; ++l) {
      fmt::print("layer {:>2} max |logit| per head:", l);
      for (int64_t h = 0; h < m.n_head; ++h) fmt::print(" {:7.2f}", ml[l * m.n_head + h]);
      fmt::print("\n         max range per head:  ");
      for (int64_t h = 0; h < m.n_head; ++h) fmt::print(" {:7.2f}", mr[l * m.n_head + h]);
      fmt::print("\n");
    }
  }
}
}  // namespace

void add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Loss, perplexity and max attention logits of a model on some text");
  cmd->add_option("run_dir", a->run_dir, "a run directory written by `gpt2 train`");
  cmd->add_option("--init-from", a->init_from, "a Hugging Face GPT-2 directory instead of a run");
  cmd->add_option("--data", a->data, "a dataset directory written by `gpt2 prepare`");
  cmd->add_option("--split", a->split, "train or val (with --data)")->check(CLI::IsMember({"train", "val"}));
  cmd->add_option("--text", a->text, "a text file (.txt, .xz, .gz) to tokenize and evaluate");
  cmd->add_option("--tokens", a->tokens, "a JSON file with an array of token ids");
  cmd->add_option("--vocab", a->vocab, "vocabulary for --text (default: the run's, or GPT-2's)");
  cmd->add_option("--batch-size", a->batch_size, "sequences per batch")->check(CLI::PositiveNumber);
  cmd->add_option("--seq-len", a->seq_len, "sequence length (default: the model's context)");
  cmd->add_option("--max-batches", a->max_batches, "stop after this many batches (0 = all)");
  cmd->add_option("--device", a->device, "auto | cpu | cuda | cuda:N");
  cmd->add_flag("--json", a->json,
                "print one JSON object: loss, perplexity, max_logit and max_range per layer and head");
  cmd->callback([a] { run_eval(*a); });
}

}  // namespace keel::app
