// The gpt2 app's subcommands. Each lives in its own cmd_<name>.cpp and registers itself on
// the root CLI::App; main.cpp calls every add_*_command. To add a subcommand (train, eval,
// sample, compare, export), write cmd_<name>.cpp, declare its add function here, call it from
// main.cpp and list the file in apps/gpt2/CMakeLists.txt. Work that is not about flags belongs in
// train/, infer/, report/ or lab/, where tests can reach it.
//
// Subcommands do their work in the CLI11 callback and report failure by throwing
// (keel::Error for bad input or configuration); main turns that into a message and exit code.
#pragma once

namespace CLI {
class App;
}

namespace keel::app {

void add_prepare_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_sample_command(CLI::App& app);
void add_compare_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_lab_command(CLI::App& app);
void add_attention_map_command(CLI::App& app);
void add_bench_sample_command(CLI::App& app);
void add_attention_stats_command(CLI::App& app);

}  // namespace keel::app
