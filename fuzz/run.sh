#!/usr/bin/env bash
# Runs keel's libFuzzer targets, one after another, each for SECONDS (default 30), starting
# from the seed inputs in fuzz/corpus/<target>/. Build them first:
#   cmake --preset fuzz && cmake --build --preset fuzz --target fuzzers
# Usage: fuzz/run.sh [SECONDS] [TARGET...]   (targets: safetensors hf_config run_config
#        trainer_state shard vocab tokenizer corpus; default all)
# New interesting inputs go to build/fuzz/corpus/<target>/ (kept between runs, never into the
# repository's seeds); a crashing input is saved as build/fuzz/artifacts/<target>-crash-*,
# and the script exits non-zero. Add such an input to the normal tests as a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(safetensors hf_config run_config trainer_state shard vocab tokenizer corpus)
bin=build/fuzz/fuzz
mkdir -p build/fuzz/artifacts
export KEEL_DATA_DIR="$PWD/data"
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
failed=()
for t in "${targets[@]}"; do
  [ -x "$bin/fuzz_$t" ] || { echo "fuzz/run.sh: $bin/fuzz_$t not built (see the top of this script)" >&2; exit 2; }
  work="build/fuzz/corpus/$t"
  mkdir -p "$work"
  echo "== fuzz_$t for ${seconds}s"
  # -timeout: an input that takes 10 s is a hang; -rss_limit_mb: one that needs 2 GB is a bomb.
  if ! "$bin/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -print_final_stats=1 -artifact_prefix="build/fuzz/artifacts/$t-" "$work" "fuzz/corpus/$t" \
       2>"build/fuzz/$t.log"; then
    tail -n 40 "build/fuzz/$t.log" >&2
    failed+=("$t")
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "build/fuzz/$t.log" | tr '\n' ' '
  echo
done
if ((${#failed[@]})); then
  echo "fuzz/run.sh: findings in: ${failed[*]} (inputs in build/fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzz/run.sh: every target ran clean for ${seconds}s"
