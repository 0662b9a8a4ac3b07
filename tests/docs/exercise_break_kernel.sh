#!/usr/bin/env bash
# docs/training.md, exercise 4 ("Break a kernel and watch which test catches it"), on a copy of the
# tree: the line the exercise names is deleted from ops/cuda/attention_forward.cu, test_ops_cuda
# is rebuilt (preset emu; the copy reuses the compiler cache) and the exercise's command run. It
# must fail, and every failure it logs must be what the exercise says: an f32 case with T above 32
# (one key tile).
#   tests/docs/exercise_break_kernel.sh [SOURCE_DIR]
set -euo pipefail
src=$(realpath "${1:-$(dirname "$0")/../..}")
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-exercise.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "exercise 4: FAIL: $*"; exit 1; }

# The exercise's line to delete and its command: the backticked lines of its text.
text=$(sed -n '/^4\. \*\*Break a kernel/,/^## /p' "$src/docs/training.md")
line=$(grep -oE '^ *`for \(.*\*= alpha;`$' <<<"$text" | sed -E 's/^ *`(.*)`$/\1/')
cmd=$(grep -oE '`build/emu/tests/ops/test_ops_cuda [^`]*`' <<<"$text" | tr -d '`')
[ -n "$line" ] && [ -n "$cmd" ] || fail "the exercise's line or command not found in docs/training.md"

mkdir -p "$work/keel"
(cd "$src" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/keel")
cd "$work/keel"
kernel=ops/cuda/attention_forward.cu
[ "$(grep -cF -- "$line" "$kernel")" -eq 1 ] || fail "'$line' is not exactly one line of $kernel"
grep -vF -- "$line" "$kernel" >"$kernel.new" && mv "$kernel.new" "$kernel"

log=$(mktemp)
echo "exercise 4: $line deleted; building test_ops_cuda (preset emu)"
{ cmake --preset emu && cmake --build --preset emu --target test_ops_cuda; } >"$log" 2>&1 || { tail -n 30 "$log"; fail "build"; }
echo "exercise 4: $cmd"
if eval "$cmd" >"$log" 2>&1; then fail "the tests passed with the rescale deleted"; fi
cases=$(grep -oE 'logged: (f32|bf16|f16) B [0-9]+ T [0-9]+' "$log" | cut -d" " -f2- | sort -u || true)
[ -n "$cases" ] || { tail -n 30 "$log"; fail "no failing case was logged"; }
bad=$(awk '$1 != "f32" || $5 <= 32' <<<"$cases")
[ -z "$bad" ] || { echo "$cases"; fail "failures beyond f32 rows of more than one tile: $bad"; }
echo "exercise 4: PASS: the tests caught it, and only in f32 cases with T above 32:"
sed 's/^ */  /' <<<"$cases"
