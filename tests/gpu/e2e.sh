#!/usr/bin/env bash
# keel's end-to-end checks of the CUDA path: `gpt2 train --device cuda` against the CPU.
# tests/gpu/check.sh runs them on a GPU; the `emu` build runs them on the emulated GPU as a
# ctest (label cuda), with --reduced.
#
#   bash tests/gpu/e2e.sh BUILD_DIR [--logs DIR] [--reduced]
#
#   e2e:a f32        20 steps of `gpt2 train` in f32 on CUDA and on the CPU, same model, init
#                    and data: per-step loss within 1e-4 relative
#   e2e:b bf16, f16  the same on CUDA in bf16 / f16 against the CPU's f32: loss within 2e-2
#                    absolute, max logits per layer and head within 5% (+0.05)
#   e2e:c resume     a bf16 run on CUDA interrupted by SIGINT and resumed logs the same losses
#                    and max logits, bit for bit, as one that ran straight through (200 steps
#                    of T = 128, B = 16; --reduced: 40 steps of T = 64, B = 8)
# One line per check (PASS / FAIL, with its log), then "N passed, N failed"; exit status 1 when
# any failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="" logs="" reduced=0
while [ $# -gt 0 ]; do
  case "$1" in
    --logs) logs=$2; shift ;;
    --reduced) reduced=1 ;;
    -*) echo "e2e.sh: unknown option $1" >&2; exit 2 ;;
    *) build=$1 ;;
  esac
  shift
done
if [ -z "$build" ] || [ ! -x "$build/apps/gpt2/gpt2" ]; then
  echo "e2e.sh: give a build folder holding apps/gpt2/gpt2 and tests/gpu/compare_metrics" >&2
  exit 2
fi
gpt2=$build/apps/gpt2/gpt2
compare=$build/tests/gpu/compare_metrics
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-e2e.XXXXXX")
[ -n "$logs" ] || logs=$work/logs
mkdir -p "$logs"

passed=0 failed=0
report() {  # report NAME STATUS [DETAIL]
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "PASS  $1${3:+  ($3)}"
  else failed=$((failed + 1)); echo "FAIL  $1${3:+  ($3)}"; fi
}
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit $?; }

data=$work/data
"$gpt2" prepare -i "$root/data/corpora/austen_6novels.txt.xz" -o "$data" --train-vocab 512 >"$logs/prepare.log" 2>&1 ||
  { report "e2e: prepare data" 1 "log $logs/prepare.log"; finish; }
# Two heads of 32 (n_embd 64).
base=(--data "$data" --preset tiny --n-layer 2 --n-head 2 --n-embd 64 --attention ls --ls-window 8
      --warmup-steps 4 --lr 1e-3 --min-lr 1e-4 --log-every 1 --val-every 0 --val-batches 2 --seed 1234)
small=(--max-steps 20 --seq-len 64 --batch-size 8)
train() {  # train NAME ARGS...: a run in $work/NAME, log in $logs/NAME.log (appended)
  local name=$1; shift
  "$gpt2" train --run-dir "$work/$name" "${base[@]}" "$@" >>"$logs/$name.log" 2>&1
}
train cpu-f32 "${small[@]}" --device cpu --dtype f32; cpu_rc=$?
train cuda-f32 "${small[@]}" --device cuda --dtype f32; rc=$?
if [ "$cpu_rc" -ne 0 ] || [ "$rc" -ne 0 ]; then
  report "e2e:a f32 cuda vs cpu" 1 "a run failed, logs $logs/cpu-f32.log $logs/cuda-f32.log"
else
  out=$("$compare" "$work/cuda-f32/metrics.jsonl" "$work/cpu-f32/metrics.jsonl" --steps 20 --loss-rel 1e-4 2>&1)
  report "e2e:a f32 cuda vs cpu" $? "$(echo "$out" | tail -n 1)"
fi
for dt in bf16 f16; do
  train "cuda-$dt" "${small[@]}" --device cuda --dtype "$dt"; rc=$?
  if [ "$cpu_rc" -ne 0 ] || [ "$rc" -ne 0 ]; then
    report "e2e:b $dt cuda vs f32 cpu" 1 "a run failed, log $logs/cuda-$dt.log"
    continue
  fi
  out=$("$compare" "$work/cuda-$dt/metrics.jsonl" "$work/cpu-f32/metrics.jsonl" --steps 20 --loss-abs 2e-2 \
          --logit-rel 0.05 --logit-abs 0.05 2>&1)
  report "e2e:b $dt cuda vs f32 cpu" $? "$(echo "$out" | tail -n 1)"
done

if [ "$reduced" -eq 1 ]; then steps=40 long=(--max-steps 40 --seq-len 64 --batch-size 8 --ckpt-every 0)
else steps=200 long=(--max-steps 200 --seq-len 128 --batch-size 16 --ckpt-every 0); fi
train resume-straight --device cuda --dtype bf16 "${long[@]}"; straight_rc=$?
# gpt2 itself in the background (not a function's subshell), so that $! is the process to signal.
"$gpt2" train --run-dir "$work/resume-cut" "${base[@]}" --device cuda --dtype bf16 "${long[@]}" \
  >>"$logs/resume-cut.log" 2>&1 &
pid=$!
for _ in $(seq 1 30000); do
  records=$(grep -c '"kind":"train"' "$work/resume-cut/metrics.jsonl" 2>/dev/null || true)
  [ "${records:-0}" -ge 5 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.01
done
kill -INT "$pid" 2>/dev/null
wait "$pid"; cut_rc=$?
if [ "$straight_rc" -ne 0 ] || [ "$cut_rc" -ne 0 ] || ! grep -q 'stopped by a signal' "$logs/resume-cut.log"; then
  report "e2e:c interrupt and resume bit-exact" 1 "the straight run failed or the signal did not stop the cut run mid-way, logs in $logs"
else
  train resume-cut --device cuda --dtype bf16 "${long[@]}" --resume
  out=$("$compare" "$work/resume-cut/metrics.jsonl" "$work/resume-straight/metrics.jsonl" --steps "$steps" --exact 2>&1)
  report "e2e:c interrupt and resume bit-exact" $? "$(echo "$out" | tail -n 1)"
fi
finish
