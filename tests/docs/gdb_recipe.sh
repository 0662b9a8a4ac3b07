#!/usr/bin/env bash
# The README's recipe "Reading a CUDA kernel without a GPU", run as a reader types it, with gdb in
# batch mode instead of at a prompt:
#   tests/docs/gdb_recipe.sh [SOURCE_DIR]
# Its build commands run as written (a Debug build of the emulated GPU in build/emu-gdb). Its gdb
# line runs with the README's breakpoint and then the commands the README suggests at it:
# `print threadIdx`, `print blockIdx`, and `condition 1 threadIdx.x == 37` with a `continue`,
# after which thread 37 must be the one stopped. Fails, naming what did not happen, when the
# breakpoint names no kernel, is never hit, or gdb cannot read the emulated thread's index.
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
command -v gdb >/dev/null || { echo "gdb_recipe: gdb is missing; bash .ci/setup --test installs it"; exit 1; }

# The README's block: the ```sh block that holds `gdb -q`, its continuation lines joined.
block=$(awk '/^```sh$/ {b = ""; inb = 1; next} /^```$/ {if (inb && b ~ /gdb -q/) {printf "%s", b; exit} inb = 0; next}
             inb {b = b $0 "\n"}' README.md | sed -e ':a' -e '/\\$/N; s/\\\n//; ta')
[ -n "$block" ] || { echo "gdb_recipe: no \`\`\`sh block with 'gdb -q' in README.md"; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
while IFS= read -r line; do
  case $line in
    cmake\ *)
      echo "gdb_recipe: $line"
      eval "$line" >"$log" 2>&1 || { tail -n 30 "$log"; echo "gdb_recipe: FAIL: '$line' failed"; exit 1; } ;;
    gdb\ *)
      # At the prompt the reader types these; here they follow `-ex run`.
      batch=${line/gdb -q/gdb -q -batch -ex \'set pagination off\'}
      batch=${batch/-ex run/-ex run -ex \'print threadIdx\' -ex \'print blockIdx\' \
        -ex \'condition 1 threadIdx.x == 37\' -ex continue -ex \'print threadIdx.x\'}
      echo "gdb_recipe: $batch"
      eval "$batch" >"$log" 2>&1 || true ;;
  esac
done <<<"$block"

fail() { tail -n 40 "$log"; echo "gdb_recipe: FAIL: $1"; exit 1; }
grep -q '^Breakpoint 1 at' "$log" || fail "the README's breakpoint names no function gdb knows"
[ "$(grep -c '^Thread .* hit Breakpoint 1\|^Breakpoint 1, ' "$log")" -ge 2 ] ||
  fail "the breakpoint was not hit twice (once, then for thread 37)"
grep -q '= {x = [0-9]*, y = [0-9]*, z = [0-9]*}' "$log" || fail "print threadIdx did not answer with an index"
grep -q '^\$[0-9]* = 37$' "$log" || fail "after 'condition 1 threadIdx.x == 37', thread 37 was not the one stopped"
echo "gdb_recipe: PASS: the breakpoint was hit, print threadIdx answered, and thread 37 stopped on its condition"
