// gpt2: keel's GPT-2 app, one binary with subcommands (see commands.h).
//
// Exit codes: 0 success; 1 a keel error (bad input file, configuration) or other failure,
// printed as one message; 2 a command-line usage error (CLI11's message and usage hint).
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "apps/gpt2/cli/commands.h"
#include "core/error.h"
#include "core/parallel.h"

int main(int argc, char** argv) {
  CLI::App app{"gpt2: prepare data, train and evaluate GPT-2 models with keel", "gpt2"};
  app.require_subcommand(1);
  keel::app::add_prepare_command(app);
  keel::app::add_tokenize_command(app);
  keel::app::add_train_command(app);
  keel::app::add_eval_command(app);
  keel::app::add_sample_command(app);
  keel::app::add_compare_command(app);
  keel::app::add_export_command(app);
  keel::app::add_convert_command(app);
  keel::app::add_lab_command(app);
  keel::app::add_attention_map_command(app);
  keel::app::add_bench_sample_command(app);
  keel::app::add_attention_stats_command(app);
  try {
    (void)keel::parallel::threads();  // a bad KEEL_NUM_THREADS is refused before any work starts
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  } catch (const keel::Error& e) {
    fmt::print(stderr, "gpt2: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpt2: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
