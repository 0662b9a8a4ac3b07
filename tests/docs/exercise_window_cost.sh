#!/usr/bin/env bash
# docs/training.md, exercise 2 ("Change a head's window and predict the cost"), as a student does
# it: the tiny model trained for 2 steps with --profile 1 under MHSA, LS with window 8 and LS
# with window 16; each run's `attention` forward row must show the FLOPs the exercise computes.
#   tests/docs/exercise_window_cost.sh GPT2 [SOURCE_DIR]
set -euo pipefail
gpt2=$(realpath "$1")
src=$(realpath "${2:-$(dirname "$0")/../..}")
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-exercise.XXXXXX")
trap 'rm -rf "$work"' EXIT
export CUDA_VISIBLE_DEVICES=  # the CPU, as the exercise runs

# The exercise's numbers, read from the doc: "... = 5.25 MF", "(answer: 6.11 MF; with `--attention mhsa`, 8.52 MF)"
doc=$(sed -n '/^2\. \*\*Change a head/,/^3\. \*\*/p' "$src/docs/training.md" | tr '\n' ' ')
w8=$(grep -oE '= [0-9.]+ MF' <<<"$doc" | head -n 1 | grep -oE '[0-9.]+')
w16=$(grep -oE 'answer: [0-9.]+ MF' <<<"$doc" | grep -oE '[0-9.]+')
mhsa=$(grep -oE 'mhsa`, [0-9.]+ MF' <<<"$doc" | grep -oE '[0-9.]+ MF' | grep -oE '[0-9.]+')
[ -n "$w8" ] && [ -n "$w16" ] && [ -n "$mhsa" ] || { echo "exercise 2: FAIL: the doc's numbers not found"; exit 1; }

# Any corpus will do: attention's FLOPs depend on the shapes alone.
"$gpt2" prepare --synthetic markov -o "$work/data" --train-vocab 320 >"$work/prepare.log" 2>&1 ||
  { cat "$work/prepare.log"; echo "exercise 2: FAIL: prepare"; exit 1; }
flops() {  # flops RUN ARGS...: the attention forward row's FLOP column of a profiled step
  local run=$1
  shift
  "$gpt2" train --data "$work/data" --run-dir "$work/$run" --preset tiny --seq-len 64 --max-steps 2 --profile 1 \
    "$@" >"$work/$run.log" 2>&1 || { tail -n 20 "$work/$run.log"; echo "exercise 2: FAIL: $run did not train"; exit 1; }
  awk '$1 == "attention" && $2 == "forward" {for (i = 3; i <= NF; i++) if ($i == "MF") {print $(i - 1); exit}}' \
    "$work/$run.log"
}
fails=0
check() {  # check NAME GOT WANT
  if [ "$2" = "$3" ]; then echo "exercise 2: $1: $2 MF, as predicted"
  else echo "exercise 2: FAIL: $1: the profile says '$2' MF, the exercise predicts $3 MF"; fails=$((fails + 1)); fi
}
check "LS, window 8" "$(flops w8 --attention ls)" "$w8"
check "LS, window 16" "$(flops w16 --attention ls --ls-window 16)" "$w16"
check "MHSA" "$(flops mhsa --attention mhsa)" "$mhsa"
[ "$fails" -eq 0 ]
