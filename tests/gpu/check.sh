#!/usr/bin/env bash
# keel's GPU check: proves the CUDA half of keel right on any machine with an NVIDIA GPU.
#
#   bash tests/gpu/check.sh [BUILD_DIR] [--demo]
#
# BUILD_DIR: a configured and built cuda-preset folder to use; by default the script builds
# the `cuda` preset into build/cuda. --demo also runs the GPU branch of .ci/demo (the paper's
# model, T = 2048, bf16; tens of minutes), which the default check leaves out.
#
# Checks, one line each, then "N passed, N failed" (exit status 1 when any failed):
#   build               the cuda preset (or BUILD_DIR) builds
#   cuda tests          every CUDA test case passes, none skipped
#   sanitizer:TOOL:BIN  compute-sanitizer memcheck, racecheck, synccheck and initcheck over the
#                       CUDA op, attention and optimizer tests at reduced sizes
#                       (KEEL_TEST_REDUCED=1 makes the tests pick small shapes), one run per
#                       test case, each within KEEL_SANITIZER_TIMEOUT seconds (default 600)
#   e2e:a f32           20 steps of `gpt2 train` in f32 on CUDA and on the CPU, same model,
#                       init and data: per-step loss within 1e-4 relative
#   e2e:b bf16, f16     the same on CUDA in bf16 / f16 against the CPU's f32: loss within 2e-2
#                       absolute, max logits per layer and head within 5% (+0.05)
#   e2e:c resume        a run interrupted by SIGINT and resumed logs the same losses and max
#                       logits, bit for bit, as one that ran straight through
#   demo                (with --demo) the GPU branch of .ci/demo completes, writes its report,
#                       and no run diverged or had a non-finite max logit
# On a machine without an NVIDIA GPU it says so and exits 0, having checked nothing.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
smi=${KEEL_NVIDIA_SMI:-nvidia-smi}  # the GPU probe; tests point it at `false` to take the no-GPU path

build="" demo=0
for arg in "$@"; do
  case "$arg" in
    --demo) demo=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "check.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) build=$arg ;;
  esac
done

if ! "$smi" -L 2>/dev/null | grep -q '^GPU'; then
  echo "gpu check: no NVIDIA GPU on this machine ($smi -L lists none); nothing checked, skipped"
  exit 0
fi
"$smi" -L | head -n 1

passed=0 failed=0
report() {  # report NAME STATUS [DETAIL]
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "PASS  $1${3:+  ($3)}"
  else failed=$((failed + 1)); echo "FAIL  $1${3:+  ($3)}"; fi
}
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit $?; }
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-gpu-check.XXXXXX")
logs=$work/logs
mkdir -p "$logs"
echo "logs in $logs"

# --- build ---------------------------------------------------------------------------------
if [ -z "$build" ]; then
  build=$root/build/cuda
  (cd "$root" && cmake --preset cuda && cmake --build --preset cuda -j "$(nproc)") >"$logs/build.log" 2>&1
  report build $? "build/cuda, log $logs/build.log"
else
  build=$(cd "$build" && pwd)
  (cmake --build "$build" -j "$(nproc)") >"$logs/build.log" 2>&1
  report build $? "$build"
fi
[ "$failed" -eq 0 ] || finish
gpt2=$build/apps/gpt2/gpt2
compare=$build/tests/gpu/compare_metrics
if ! grep -q 'KEEL_CUDA:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  report "cuda build" 1 "$build was not configured with KEEL_CUDA=ON (use the cuda preset)"
  finish
fi

# --- every CUDA test -----------------------------------------------------------------------
# Case names say CUDA (or cuda); a skip here means the GPU was not used, which is a failure.
(cd "$build" && ctest -L cuda -j 4 --output-on-failure) >"$logs/ctest.log" 2>&1
rc=$?
ran=$(grep -c ' Test *#' "$logs/ctest.log")
skipped=$(grep -c 'Skipped' "$logs/ctest.log")
[ "$ran" -gt 0 ] && [ "$skipped" -eq 0 ] || rc=1
report "cuda tests" "$rc" "$ran cases, $skipped skipped, log $logs/ctest.log"

# --- compute-sanitizer ---------------------------------------------------------------------
# One sanitizer run per test case, each with its own time limit: racecheck and initcheck slow
# kernels by 10-1000x, so a whole binary under them does not fit any limit that would still
# catch a hung case, and a timeout then hid the verdict on every case after it. One line per
# tool and binary still; the failing cases are named, and each case has its own log.
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
case_timeout=${KEEL_SANITIZER_TIMEOUT:-600}  # seconds per test case under one tool

# The CUDA test cases of a doctest binary, one name per line (listing runs none of them).
cuda_cases() {
  "$1" --list-test-cases 2>/dev/null | awk '/^=====/ { sep++; next } sep == 1 { print }'
}

# sanitize TOOL BIN: every CUDA case of tests/BIN under `compute-sanitizer --tool TOOL`.
sanitize() {
  local tool=$1 bin=$2 name dir exe i=0 rc tc filter log
  name="sanitizer:$tool:$(basename "$bin")"
  dir="$logs/$tool-$(basename "$bin")"
  exe=$build/tests/$bin
  if [ ! -x "$sanitizer" ]; then report "$name" 1 "compute-sanitizer not found"; return; fi
  local -a cases=() bad=()
  mapfile -t cases < <(cuda_cases "$exe")
  if [ "${#cases[@]}" -eq 0 ]; then report "$name" 1 "$exe lists no CUDA test cases"; return; fi
  mkdir -p "$dir"
  for tc in "${cases[@]}"; do
    i=$((i + 1))
    log="$dir/case-$i.log"
    printf '%s\t%s\n' "$i" "$tc" >>"$dir/cases.txt"
    # doctest splits --test-case at commas; '?' matches the comma (and any one character).
    filter=${tc//,/?}
    KEEL_TEST_REDUCED=1 timeout --kill-after=30 "$case_timeout" "$sanitizer" --tool "$tool" --error-exitcode 99 \
      "$exe" --test-case="$filter" >"$log" 2>&1
    rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      bad+=("$tc: timed out after $case_timeout s")
    elif [ "$rc" -ne 0 ] || ! grep -q 'ERROR SUMMARY: 0 errors\|RACECHECK SUMMARY: 0 hazards' "$log"; then
      bad+=("$tc: exit $rc")
    elif ! grep -Eq 'test cases: *1 \| *1 passed' "$log" || grep -q 'KEEL_SKIP' "$log"; then
      bad+=("$tc: did not run as one passing case")  # a filter that matched nothing, or a skip
    fi
  done
  if [ "${#bad[@]}" -eq 0 ]; then
    report "$name" 0 "${#cases[@]} cases, logs in $dir"
  else
    local joined more=""
    joined=$(printf '%s; ' "${bad[@]:0:5}")  # the first few keep the line readable
    [ "${#bad[@]}" -gt 5 ] && more=" and $((${#bad[@]} - 5)) more"
    report "$name" 1 "${#bad[@]} of ${#cases[@]} cases failed: ${joined%; }$more; logs in $dir (case-N.log, names in cases.txt)"
  fi
}
for tool in memcheck racecheck synccheck initcheck; do
  for bin in ops/test_ops_cuda optim/test_optim_cuda core/test_core_cuda; do sanitize "$tool" "$bin"; done
done

# --- end to end (tests/gpu/e2e.sh: its lines count as this check's) -----------------------------
while IFS= read -r line; do
  case "$line" in
    PASS*) passed=$((passed + 1)); echo "$line" ;;
    FAIL*) failed=$((failed + 1)); echo "$line" ;;
  esac
done < <(bash "$root/tests/gpu/e2e.sh" "$build" --logs "$logs")

if [ "$demo" -eq 1 ]; then
  (cd "$root" && bash .ci/demo) >"$logs/demo.log" 2>&1
  rc=$?
  # Sane: the report exists, and the run summaries it printed name no divergence or NaN logit.
  [ -f "$root/runs/demo-gpu/report.html" ] || rc=1
  grep -q 'diverged\|non-finite' "$logs/demo.log" && rc=1
  report "demo (GPU branch)" "$rc" "log $logs/demo.log, report $root/runs/demo-gpu/report.html"
fi
finish
