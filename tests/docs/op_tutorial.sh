#!/usr/bin/env bash
# The "add an op" tutorial of docs/ops.md, done as a reader does it, on a copy of the tree:
#   tests/docs/op_tutorial.sh [SOURCE_DIR]
# Copies the tree (its tracked files), applies every tutorial block (tests/docs/op_tutorial.py),
# then runs the tutorial's own last step, "Build and test", as written: the new op's tests on the
# CPU and on the emulated GPU. A build without CUDA (preset `debug`) then checks the op's stubs:
# its test of the signatures and of the DeviceError a CUDA tensor meets. Each run must execute
# the new test cases (a filter that matched none would pass). The copy's build reuses the compiler
# cache of the tree's own builds (ccache keys on paths relative to the source folder).
set -euo pipefail
src=$(realpath "${1:-$(dirname "$0")/../..}")
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-op-tutorial.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/keel"
(cd "$src" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/keel")
python3 "$src/tests/docs/op_tutorial.py" "$src/docs/ops.md" "$work/keel"
cd "$work/keel"
export CCACHE_NOHASHDIR=1  # debug builds (-g) hash the build folder unless told not to

log=$(mktemp)
ran() {  # ran LOG MIN: the doctest summary in LOG counts at least MIN cases, all passed
  local line
  line=$(grep -E '^\[doctest\] test cases:' "$1" | tail -n 1)
  [[ $line =~ test\ cases:\ *([0-9]+)\ \|\ *([0-9]+)\ passed ]] && ((BASH_REMATCH[1] >= $2)) &&
    ((BASH_REMATCH[1] == BASH_REMATCH[2]))
}

# The tutorial's step 8: the ```sh block after "**8. Build and test**".
step=$(awk '/^\*\*8\. Build and test\*\*/ {on = 1} on && /^```sh$/ {inb = 1; next} inb && /^```$/ {exit} inb {print}' docs/ops.md)
[ -n "$step" ] || { echo "op_tutorial: FAIL: docs/ops.md has no step 8 block"; exit 1; }
while IFS= read -r line; do
  echo "op_tutorial: $line"
  if ! eval "$line" >"$log" 2>&1; then tail -n 40 "$log"; echo "op_tutorial: FAIL: $line"; exit 1; fi
  case $line in
    *test_ops_cuda*-tc=*) ran "$log" 1 || { cat "$log"; echo "op_tutorial: FAIL: no silu case ran on the emulated GPU"; exit 1; } ;;
    *test_ops*-tc=*) ran "$log" 3 || { cat "$log"; echo "op_tutorial: FAIL: the CPU silu cases did not all run"; exit 1; } ;;
  esac
done <<<"$step"

echo "op_tutorial: the stubs, in a build without CUDA (preset debug)"
cmake --preset debug >/dev/null
cmake --build --preset debug --target test_ops >"$log" 2>&1 || { tail -n 40 "$log"; echo "op_tutorial: FAIL: debug build"; exit 1; }
build/debug/tests/ops/test_ops -tc='*silu*,*without CUDA*' >"$log" 2>&1 && ran "$log" 4 ||
  { tail -n 40 "$log"; echo "op_tutorial: FAIL: the silu cases or its stubs in the debug build"; exit 1; }
echo "op_tutorial: PASS: silu built and passed its tests on the CPU, the emulated GPU, and without CUDA"
