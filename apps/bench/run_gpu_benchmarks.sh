#!/usr/bin/env bash
# Every GPU benchmark of keel against its PyTorch baseline, in one command on a GPU machine.
# See docs/gpu-benchmarks.md for what each number means and the targets.
#
# On a GPU machine that has keel's build dependencies, one machine does both steps below:
#   bash apps/bench/run_gpu_benchmarks.sh stage && bash apps/bench/run_gpu_benchmarks.sh --out runs/gpu-bench
# Where the GPU machine lacks them (a cluster node with only the CUDA driver, toolkit and
# PyTorch), use two steps on two machines:
#
#   1. On a build machine (no GPU needed; nvcc, CMake and keel's dependencies):
#        bash apps/bench/run_gpu_benchmarks.sh stage
#      builds gpt2, bench_ops and bench_attention with `cmake --preset cuda` (build/cuda) and
#      packs them, with the shared libraries they need that the device may lack (libfmt, ICU,
#      ...), into build/gpu-stage/stage.tar.xz (ignored by git; about 13 MB, so it is quick
#      to copy to the GPU machine).
#
#   2. On the GPU machine, in a copy of the repository with build/gpu-stage copied in:
#        bash apps/bench/run_gpu_benchmarks.sh [--out DIR]
#      runs, each part under its own time limit inside a total budget (BENCH_BUDGET_S, 780 s):
#        bench_attention       the FlashAttention-2 comparison: B 8, H 12, D 64/128, T 1k..8k,
#                              MHSA and LS (w 50), keel's kernels               -> $OUT/attention_fa2_keel.jsonl
#                              and with --kernel sm90 (Hopper's forward), T 2k..16k  (impl keel-sm90, same file)
#        attention_baseline.py the same in PyTorch (SDPA flash; masked SDPA for LS) -> $OUT/attention_fa2_torch.jsonl
#        ncu                   (when ncu is installed) the mma forward and backward kernels at
#                              D 128, T 4096: speed of light, occupancy, memory    -> log.txt
#        bench_ops             keel matmul/linear vs bare cuBLAS            -> log.txt
#        bench_attention       keel attention fwd, fwd+bwd (mma kernels), every pattern -> $OUT/attention_keel.jsonl
#        attention_baseline.py the same configs in PyTorch                  -> $OUT/attention_torch.jsonl
#        gpt2 prepare + train  gpt2-124m (T 1024), paper MHSA and LS (T 2048) -> $OUT/train_keel.jsonl
#        train_baseline.py     the same models in PyTorch (eager; + compile) -> $OUT/train_torch.jsonl
#      then merges the JSON lines into a keel-vs-PyTorch table (apps/bench/gpu_summary.py):
#      $OUT/summary.md, printed last.
#      Everything printed is also in $OUT/log.txt. Eight files in $OUT, no folders, so the
#      results are easy to copy back.
#
# Environment (all optional):
#   SKIP_FA2, SKIP_NONDET, SKIP_SM90, SKIP_NCU, SKIP_OPS, SKIP_ATTN_KEEL, SKIP_ATTN_TORCH, SKIP_TRAIN_KEEL,
#   SKIP_TRAIN_TORCH      =1 skips a part (SKIP_NONDET: the comparison's MHSA rows again with the
#                         backward's dQ added in any order, --nondeterministic)
#   FA2_ARGS="..."        the FlashAttention-2 comparison's configs (default: --batch 8 --heads 12
#                         --dims 64,128 --seqs 1024,2048,4096,8192 --patterns mhsa,ls_w50)
#   TORCH_COMPILE=0       no torch.compile run of gpt2-124m (default 1: one extra row, run last)
#   ATTN_ARGS="..."       extra flags for both attention benchmarks (e.g. "--dims 64 --seqs 2048")
#   QUICK=1               a smoke test: D 64, T 1k/2k, 10 training steps
#   TRAIN_STEPS=50        keel training steps per run; the first TRAIN_SKIP=10 are not summarised
#   BENCH_BUDGET_S=780    total seconds; a part gets at most what is left less a reserve
#   KEEL_STAGE=DIR        where the staged binaries are (default build/gpu-stage)
#   OUT=DIR               the output folder for the results, as --out DIR (default runs/gpu-bench)
#   PYTHON=python3        the Python that has torch
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STAGE=${KEEL_STAGE:-$ROOT/build/gpu-stage}
PY=${PYTHON:-python3}

# ---------------------------------------------------------------------------------------------
# stage: build on this machine and collect what the GPU machine needs.
# ---------------------------------------------------------------------------------------------
if [[ "${1:-run}" == "stage" ]]; then
  set -e
  BUILD=${KEEL_BUILD_DIR:-$ROOT/build/cuda}
  if [[ "${KEEL_STAGE_BUILD:-1}" == "1" ]]; then
    (cd "$ROOT" && cmake --preset cuda && cmake --build --preset cuda --target gpt2 bench_ops bench_attention)
  fi
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  mkdir -p "$TMP/bin" "$TMP/lib" "$TMP/lib-fallback"
  for b in apps/gpt2/gpt2 apps/bench/bench_ops apps/bench/bench_attention; do
    [[ -x "$BUILD/$b" ]] || { echo "stage: $BUILD/$b is missing: build it first" >&2; exit 1; }
    cp "$BUILD/$b" "$TMP/bin/"
  done
  # Shared libraries: glibc's come from the device's system (same or newer), the CUDA and NCCL
  # ones from its toolkit and PyTorch's nvidia packages; everything else travels (libfmt, ICU,
  # ...; the run uses a staged one only where the device has none of that name). libstdc++ and
  # libgcc_s travel as a fallback only, used when the device's are older than the build's.
  for lib in $(ldd "$TMP"/bin/* | awk '/=> \// {print $3}' | sort -u); do
    base=$(basename "$lib")
    case "$base" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libresolv.so*) ;;
      libcuda.so*|libcudart.so*|libcublas*|libnccl*|libnvidia*|libnvrtc*|libnvJitLink*) ;;
      libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$TMP/lib-fallback/$base" ;;
      *) cp -L "$lib" "$TMP/lib/$base" ;;
    esac
  done
  { git -C "$ROOT" rev-parse HEAD; git -C "$ROOT" status --porcelain; } > "$TMP/commit" 2>/dev/null || true
  ls -la "$TMP/bin" "$TMP/lib" "$TMP/lib-fallback"
  # Compressed (about 13 MB instead of 60), so that it is quick to copy.
  rm -rf "$STAGE"
  mkdir -p "$STAGE"
  tar -C "$TMP" -cJf "$STAGE/stage.tar.xz" bin lib lib-fallback commit
  cp "$TMP/commit" "$STAGE/commit"
  echo "staged: $(du -h "$STAGE/stage.tar.xz" | cut -f1) in $STAGE/stage.tar.xz; copy build/gpu-stage to the GPU machine (or run the benchmarks here)"
  exit 0
fi

# ---------------------------------------------------------------------------------------------
# run: on the machine with the GPU.
# ---------------------------------------------------------------------------------------------
if [[ "${1:-}" == "--out" ]]; then
  [[ -n "${2:-}" ]] || { echo "run_gpu_benchmarks.sh: --out needs a folder" >&2; exit 2; }
  OUT=$2
elif [[ -n "${1:-}" ]]; then
  echo "run_gpu_benchmarks.sh: unknown argument '$1' (use: stage | --out DIR)" >&2
  exit 2
fi
OUT=${OUT:-$ROOT/runs/gpu-bench}
mkdir -p "$OUT"
WORK=${KEEL_BENCH_WORK:-/tmp/keel-gpu-bench}  # datasets and run directories (checkpoints): not in $OUT
rm -rf "$WORK"
mkdir -p "$WORK"
exec 3>&1 4>&2
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
BUDGET=${BENCH_BUDGET_S:-780}
RESERVE=25  # seconds kept for the summary
QUICK=${QUICK:-0}
TRAIN_STEPS=${TRAIN_STEPS:-50}
TRAIN_SKIP=${TRAIN_SKIP:-10}
ATTN_ARGS=${ATTN_ARGS:-}
FA2_ARGS=${FA2_ARGS:-"--batch 8 --heads 12 --dims 64,128 --seqs 1024,2048,4096,8192 --patterns mhsa,ls_w50"}
TORCH_STEPS="--warmup 10 --steps 30"
if [[ "$QUICK" == "1" ]]; then
  ATTN_ARGS="--dims 64 --seqs 1024,2048 $ATTN_ARGS"
  FA2_ARGS="$FA2_ARGS --dims 64 --seqs 1024,2048"
  TRAIN_STEPS=10 TRAIN_SKIP=3 TORCH_STEPS="--warmup 3 --steps 5"
fi

banner() { printf '\n===== %s (t = %ds) =====\n' "$1" "$SECONDS"; }

# run_part NAME CAP_SECONDS CMD...: runs CMD under `timeout`, capped by what is left of the budget.
run_part() {
  local name=$1 cap=$2
  shift 2
  local left=$((BUDGET - RESERVE - SECONDS))
  local limit=$((cap < left ? cap : left))
  if ((limit < 15)); then
    echo "[$name] skipped: only ${left}s of the budget left"
    return 0
  fi
  echo "[$name] (limit ${limit}s) $*"
  local t0=$SECONDS rc=0
  timeout -k 10 "$limit" "$@" || rc=$?
  if ((rc == 124 || rc == 137)); then
    echo "[$name] STOPPED at its time limit (${limit}s); results so far are kept"
  elif ((rc != 0)); then
    echo "[$name] FAILED with exit code $rc"
  fi
  echo "[$name] took $((SECONDS - t0))s"
  return 0
}

banner "environment"
# The staged binaries and libraries: a tarball from `stage`, or an unpacked directory.
if [[ -f "$STAGE/stage.tar.xz" ]]; then
  mkdir -p "$WORK/stage"
  tar -C "$WORK/stage" -xJf "$STAGE/stage.tar.xz" || echo "could not unpack $STAGE/stage.tar.xz"
  STAGE=$WORK/stage
fi
BIN=$STAGE/bin
[[ -d "$BIN" ]] || echo "no staged binaries in $STAGE: run 'bash apps/bench/run_gpu_benchmarks.sh stage' on a build machine and copy build/gpu-stage here"
head -20 "$STAGE/commit" 2>/dev/null
NV_DIRS=$("$PY" - <<'EOF' 2>/dev/null
import glob, os, site
roots = []
try:
    import nvidia
    roots += list(getattr(nvidia, "__path__", []))
except Exception:
    pass
for sp in site.getsitepackages():
    roots.append(os.path.join(sp, "nvidia"))
dirs = []
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "*", "lib")) + glob.glob(os.path.join(r, "*", "*", "lib"))):
        if os.path.isdir(d) and d not in dirs:
            dirs.append(d)
print(":".join(dirs))
EOF
)
# The keel binaries (and only they: Python keeps its own environment) get the CUDA toolkit's and
# PyTorch's nvidia libraries, plus those staged libraries that this machine does not have.
mkdir -p "$WORK/lib"
for l in "$STAGE"/lib/*; do
  [[ -e "$l" ]] || continue
  b=$(basename "$l")
  ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$b " || ln -sf "$l" "$WORK/lib/$b"
done
KEEL_LDP="$WORK/lib:/usr/local/cuda/lib64"
[[ -n "$NV_DIRS" ]] && KEEL_LDP="$KEEL_LDP:$NV_DIRS"
[[ -d /usr/local/nvidia/lib64 ]] && KEEL_LDP="$KEEL_LDP:/usr/local/nvidia/lib64"
KEEL_LDP="$KEEL_LDP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if env LD_LIBRARY_PATH="$KEEL_LDP" ldd "$BIN"/* 2>&1 | grep -q "not found"; then
  echo "some libraries are missing; adding the staged libstdc++/libgcc_s fallback"
  KEEL_LDP="$KEEL_LDP:$STAGE/lib-fallback"
fi
K=(env LD_LIBRARY_PATH="$KEEL_LDP")  # prefix of every keel command
export KEEL_DATA_DIR=$ROOT/data  # the bundled GPT-2 vocabulary (the build's path is this machine's)
echo "keel's LD_LIBRARY_PATH=$KEEL_LDP"
echo "staged libraries used: $(ls "$WORK/lib" | tr '\n' ' ')"
for b in "$BIN"/*; do
  echo "--- ldd $b"
  "${K[@]}" ldd "$b"
done
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv 2>&1
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' 2>&1

if [[ "${SKIP_FA2:-0}" != "1" ]]; then
  banner "FlashAttention-2 comparison: keel, PyTorch"
  # shellcheck disable=SC2086
  run_part bench_attention_fa2 150 "${K[@]}" "$BIN/bench_attention" --json "$OUT/attention_fa2_keel.jsonl" \
    $FA2_ARGS
  # shellcheck disable=SC2086
  run_part attention_baseline_fa2 120 "$PY" "$ROOT/apps/bench/attention_baseline.py" \
    --json "$OUT/attention_fa2_torch.jsonl" $FA2_ARGS
  if [[ "${SKIP_NONDET:-0}" != "1" ]]; then
    # MHSA again with the backward's dQ adds in any order (keel::set_deterministic(false)): what
    # the default's ordered adds cost. Appended to keel's file as impl "keel-nondet".
    # shellcheck disable=SC2086
    run_part bench_attention_fa2_nondet 90 "${K[@]}" "$BIN/bench_attention" --json "$WORK/nondet.jsonl" \
      $FA2_ARGS --patterns mhsa --nondeterministic
    [[ -f "$WORK/nondet.jsonl" ]] && cat "$WORK/nondet.jsonl" >> "$OUT/attention_fa2_keel.jsonl"
  fi
fi

if [[ "${SKIP_SM90:-0}" != "1" ]]; then
  # Hopper's warpgroup forward (--kernel sm90; on other GPUs the same rows run mma), MHSA and LS,
  # D 64/128, T 2k..16k. Appended to keel's file as impl "keel-sm90".
  banner "Hopper's attention forward (--kernel sm90): keel"
  run_part bench_attention_sm90 150 "${K[@]}" "$BIN/bench_attention" --json "$WORK/sm90.jsonl" --kernel sm90 \
    --batch 8 --heads 12 --dims 64,128 --seqs 2048,4096,8192,16384 --patterns mhsa,ls_w50
  [[ -f "$WORK/sm90.jsonl" ]] && cat "$WORK/sm90.jsonl" >> "$OUT/attention_fa2_keel.jsonl"
fi

if [[ "${SKIP_NCU:-0}" != "1" ]]; then
  if command -v ncu >/dev/null 2>&1; then
    banner "ncu: the mma attention kernels (D 128, T 4096, MHSA)"
    for kernel in attention_mma_forward_kernel attention_mma_backward_kernel; do
      run_part "ncu_$kernel" 90 "${K[@]}" ncu --kernel-name "regex:$kernel" --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
        --section ComputeWorkloadAnalysis "$BIN/bench_attention" --batch 8 --heads 12 --dims 128 --seqs 4096 \
        --patterns mhsa --warmup 0 --min-reps 1 --max-reps 1
    done
  else
    echo "ncu (Nsight Compute) is not installed: no kernel profile (docs/gpu-benchmarks.md)"
  fi
fi

if [[ "${SKIP_OPS:-0}" != "1" ]]; then
  banner "bench_ops: keel matmul vs cuBLAS"
  run_part bench_ops 60 "${K[@]}" "$BIN/bench_ops" --iters 50
fi

if [[ "${SKIP_ATTN_KEEL:-0}" != "1" ]]; then
  banner "bench_attention: keel"
  # shellcheck disable=SC2086
  run_part bench_attention 170 "${K[@]}" "$BIN/bench_attention" --json "$OUT/attention_keel.jsonl" \
    $ATTN_ARGS
fi

if [[ "${SKIP_ATTN_TORCH:-0}" != "1" ]]; then
  banner "attention_baseline.py: PyTorch"
  # shellcheck disable=SC2086
  run_part attention_baseline 170 "$PY" "$ROOT/apps/bench/attention_baseline.py" \
    --json "$OUT/attention_torch.jsonl" $ATTN_ARGS
fi

# keel runs: name preset attention batch seq_len dataset
KEEL_RUNS=(
  "gpt2-124m_mhsa gpt2-124m mhsa 16 1024 gpt2vocab"
  "paper_mhsa paper mhsa 32 2048 vocab10k"
  "paper_ls paper ls 32 2048 vocab10k"
)
if [[ "${SKIP_TRAIN_KEEL:-0}" != "1" ]]; then
  banner "gpt2 prepare + train: keel"
  CORPUS=$ROOT/data/corpora/austen_6novels.txt.xz
  run_part prepare_gpt2vocab 60 "${K[@]}" "$BIN/gpt2" prepare -q -i "$CORPUS" -o "$WORK/gpt2vocab"
  run_part prepare_vocab10k 90 "${K[@]}" "$BIN/gpt2" prepare -q -i "$CORPUS" -o "$WORK/vocab10k" --train-vocab 10000
  for r in "${KEEL_RUNS[@]}"; do
    read -r name preset attn bsz seq data <<<"$r"
    run_part "train_$name" 110 "${K[@]}" "$BIN/gpt2" train --preset "$preset" --attention "$attn" \
      --data "$WORK/$data" --run-dir "$WORK/runs/$name" --batch-size "$bsz" --seq-len "$seq" \
      --max-steps "$TRAIN_STEPS" --warmup-steps 5 --dtype bf16 --device cuda --log-every 5 \
      --val-every 0 --val-batches 2 --ckpt-every 0 --keep-checkpoints 1
  done
  # --log-every 5: the steps between logged ones never wait for the device (docs/training.md), and a
  # logged step's tokens/s is the mean over the 5 steps it reports; train_baseline.py below reads
  # its loss every 5th step too.
  # metrics.jsonl of each run -> one summary line per run (median over logged steps >= TRAIN_SKIP).
  "$PY" - "$WORK/runs" "$OUT/train_keel.jsonl" "$TRAIN_SKIP" "${KEEL_RUNS[@]}" <<'EOF'
import json, os, statistics, sys
runs_dir, out_path, skip = sys.argv[1], sys.argv[2], int(sys.argv[3])
def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")
with open(out_path, "w") as out:
    for spec in sys.argv[4:]:
        name, preset, attn, bsz, seq, data = spec.split()
        rec = {"bench": "train", "impl": "keel", "preset": preset, "attention": attn, "B": int(bsz), "T": int(seq)}
        path = os.path.join(runs_dir, name, "metrics.jsonl")
        train = []
        if os.path.exists(path):
            for line in open(path):
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("kind") == "train":
                    train.append(r)
        timed = [r for r in train if r.get("step", 0) >= skip] or train[len(train) // 2:]
        if not timed:
            rec.update(status="error", error=f"no train records in {path}")
        else:
            tps = [num(r.get("tokens_per_s")) for r in timed]
            mfu = [num(r.get("mfu")) for r in timed]
            med = statistics.median(tps)
            mfu_med = statistics.median(mfu)
            rec.update(status="ok", steps=len(train), timed_steps=len(timed), tokens_per_s=med,
                       tokens_per_s_mean=statistics.fmean(tps), step_ms=int(bsz) * int(seq) / med * 1e3,
                       mfu=None if mfu_med != mfu_med else mfu_med,
                       mem_bytes=max(int(r["mem_bytes"]) if isinstance(r.get("mem_bytes"), int) else -1 for r in train),
                       final_loss=num(train[-1].get("loss")),
                       max_logit=max((num(x) for row in train[-1].get("max_logit", []) for x in row), default=None))
        out.write(json.dumps(rec) + "\n")
        print(f"keel {name}: {rec.get('status')} "
              + (f"{rec['tokens_per_s']:.0f} tok/s, {rec['step_ms']:.1f} ms/step, MFU {rec['mfu']}" if rec["status"] == "ok" else rec.get("error", "")))
EOF
fi

if [[ "${SKIP_TRAIN_TORCH:-0}" != "1" ]]; then
  banner "train_baseline.py: PyTorch"
  # shellcheck disable=SC2086
  run_part train_baseline 150 "$PY" "$ROOT/apps/bench/train_baseline.py" --json "$OUT/train_torch.jsonl" \
    $TORCH_STEPS --log-every 5 --run gpt2-124m:mhsa:16:1024 --run paper:mhsa:32:2048 --run paper:ls:32:2048
  if [[ "${TORCH_COMPILE:-1}" == "1" ]]; then
    # shellcheck disable=SC2086
    run_part train_baseline_compile 180 "$PY" "$ROOT/apps/bench/train_baseline.py" \
      --json "$OUT/train_torch.jsonl" $TORCH_STEPS --log-every 5 --compile --run gpt2-124m:mhsa:16:1024
  fi
fi

banner "summary"
"$PY" "$ROOT/apps/bench/gpu_summary.py" "$OUT" | tee "$OUT/summary.md"
echo "total ${SECONDS}s; files in $OUT:"
ls -la "$OUT"
exec 1>&3 2>&4 3>&- 4>&-  # let tee see the end of its input and finish writing log.txt
sleep 1
