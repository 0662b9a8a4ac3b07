#!/usr/bin/env python3
"""keel's generation latency beside PyTorch's, from one command: `gpt2 bench-sample` and its anchors,
and a check that the anchors compute keel's model.

A benchmark script, not part of keel: it imports torch and transformers, keel never does. Run it
with a Python that has them (apps/bench/bench_sample.sh makes one, in a virtual environment):

  python3 apps/bench/bench_sample.py --gpt2 build/cpu/apps/gpt2/gpt2 --out runs/bench-sample \
      [--device cpu|cuda] [--dtype f32|bf16|f16] [--anchors auto|eager|compiled|eager,compiled] \
      [-- more flags for gpt2 bench-sample]

What it does:
  1. `gpt2 bench-sample --preset paper --variants mhsa,ls --json OUT/keel.jsonl --save-hf OUT/hf`
     plus the flags after `--`: keel's prefill and decode measurements (docs/inference.md), the
     model's weights as a Hugging Face GPT-2 directory and the prompt's token ids. Each prefill
     record holds keel's greedy tokens after the prompt and each step's 8 largest logits.
  2. The anchors: transformers' GPT2LMHeadModel from OUT/hf (SDPA attention) on the same device,
     dtype, prompt and batch sizes -> OUT/torch.jsonl. The paper's model has no biases: the bias
     tensors transformers expects are set to zero, which is the same model. Hugging Face has no
     LS-attention, so the anchor is MHSA; keel's LS runs beside it.
       eager     its DynamicCache, every step an eager forward, as generate() by default
       compiled  a StaticCache and the decode step torch.compile-d (mode "reduce-overhead": CUDA
                 graphs, on a GPU), as generate(cache_implementation="static") with compilation;
                 its prefill is the uncompiled forward on the static cache, as generate()'s.
                 `auto` (the default) runs it on CUDA where the installed versions allow it.
       prefill  model(prompt, logits_to_keep=1) on a fresh cache (what generate() does first)
       decode   a cache holding `context` positions of random keys and values (as keel's
                fill_random), then steps of model(next token, cache) + argmax, as generate() loops
  3. The check (apps/bench/sample_check.py has the rule and its reasons): each anchor is
     teacher-forced on keel's greedy tokens, step by step on its cache after the timed prefill,
     and its logits are compared with keel's and with an f32 reference (the same weights, rounded
     to the dtype, in f32, one forward pass without a cache). In f32 the tokens must be equal and
     the logits within 1e-5 (the bug test); in bf16/f16 a different argmax is accepted only where
     the reference's margin is below what the measured bf16/f16 error explains. The anchor's cache
     must grow by one position per step (a transformers that ignored the cache argument would run
     each step without its context). The check runs on the MHSA prefill records.
  4. A side-by-side table, printed and written to OUT/summary.md. The exit status is 1 when a
     check fails (after everything is written).
Timing: each step is timed alone (CUDA: synchronised); the median and p90 of the steps are reported.
Without torch or transformers the script says so, runs keel alone and exits 0.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sample_check  # noqa: E402  (next to this file; no torch)
from sample_anchor import Anchor, AnchorError, load_models  # noqa: E402  (imports torch when used)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt2", required=True, help="the gpt2 binary")
    ap.add_argument("--out", default="runs/bench-sample", help="output folder")
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--dtype", default="f32", help="f32 | bf16 | f16")
    ap.add_argument("--anchors", default="auto",
                    help="auto (eager, and compiled on CUDA) | eager | compiled | eager,compiled")
    ap.add_argument("--f32-tol", type=float, default=sample_check.TOLERANCES["f32_tol"],
                    help="f32: largest |dlogit| over max(1, |top logit|)")
    ap.add_argument("--tau-factor", type=float, default=sample_check.TOLERANCES["tau_factor"],
                    help="bf16/f16: a flip is accepted below this x the measured error")
    ap.add_argument("--max-ulps", type=float, default=sample_check.TOLERANCES["max_ulps"],
                    help="bf16/f16: the largest error, in ulps of the top logit, that is rounding")
    ap.add_argument("--skip-keel", action="store_true", help="reuse OUT/keel.jsonl and OUT/hf")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- flags for gpt2 bench-sample")
    a = ap.parse_args()
    a.rest = [x for x in a.rest if x != "--"]
    return a


def run_keel(a):
    cmd = [a.gpt2, "bench-sample", "--preset", "paper", "--variants", "mhsa,ls", "--device", a.device,
           "--dtype", a.dtype, "--json", os.path.join(a.out, "keel.jsonl"), "--save-hf", os.path.join(a.out, "hf")]
    cmd += a.rest
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(q * len(xs) - 1e-9)))]


def reference_rows(ref, torch, prompt, P, tokens, dev):
    """The f32 reference's logits (rows of V floats) at the n positions where keel chose its n
    tokens: one pass over the prompt and tokens[:-1], no cache."""
    ids = torch.tensor([prompt[:P] + tokens[:-1]], device=dev)
    logits = ref(ids, use_cache=False).logits[0, P - 1:, :]
    return logits.float().cpu().tolist()


def run_anchor(a, anchor, ref, keel, prompt, versions):
    torch = anchor.torch
    dev = anchor.dev
    cfg = anchor.cfg
    H, D = cfg.n_head, cfg.n_embd // cfg.n_head
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    elem = torch.tensor([], dtype=anchor.dtype).element_size()
    prefills = [r for r in keel if r["phase"] == "prefill" and r["variant"] == "mhsa"]
    decodes = [r for r in keel if r["phase"] == "decode" and r["variant"] == "mhsa"]
    steps = decodes[0]["steps"] if decodes else 20
    records, checks = [], []
    base = {"bench": "sample", "impl": anchor.impl, "anchor": anchor.name, "variant": "mhsa", "device": str(dev),
            "dtype": a.dtype, **versions, "threads": torch.get_num_threads(),
            "cache": "StaticCache" if anchor.compiled else "DynamicCache"}
    if anchor.compile_info:
        base["compile"] = anchor.compile_info
    for p in prefills:
        B, P, want = p["B"], p["P"], p["greedy"]
        if "greedy_top_logits" not in p:
            sys.exit("bench_sample.py: keel's prefill record has no greedy_top_logits: rebuild gpt2 (or drop --skip-keel)")
        n = len(want)
        ids = torch.tensor([prompt[:P]] * B, device=dev)
        times = []
        for _ in range(p["reps"]):
            cache = anchor.new_cache(B, P + n)
            sync()
            t0 = time.perf_counter()
            logits = anchor(ids, cache, step=False)
            nxt = logits.argmax(-1)
            sync()
            times.append(time.perf_counter() - t0)
        del nxt
        # Teacher-forced on keel's tokens, on the last prefill's cache: step s sees keel's first s.
        rows = [logits[0].float().cpu().tolist()]
        for s in range(1, n):
            logits = anchor(torch.full((B, 1), want[s - 1], dtype=torch.long, device=dev), cache, step=True)
            rows.append(logits[0].float().cpu().tolist())
        ref_rows = reference_rows(ref, torch, prompt, P, want, dev)
        res = sample_check.check(a.dtype, want, p["greedy_top_ids"], p["greedy_top_logits"], rows, ref_rows,
                                 f32_tol=a.f32_tol, max_ulps=a.max_ulps, tau_factor=a.tau_factor)
        tokens = [st["anchor"] for st in res["steps"]]
        rec = {**base, "phase": "prefill", "B": B, "P": P, "seconds": statistics.median(times),
               "tokens_per_s": B * P / statistics.median(times), "greedy": tokens,
               "greedy_agrees": tokens == want, "check": res}
        records.append(rec)
        checks.append(res)
        print(f"  {anchor.name} prefill B={B} P={P}: {statistics.median(times):.3f} s; check against keel: "
              f"{sample_check.summary(res)}", flush=True)
        for f in res["failures"]:
            print(f"    {f}", flush=True)
    for d in decodes:
        B, L = d["B"], d["context"]
        # keel sizes the model for its own 3 warm-up steps (--seq-len: what the benchmark needs), so
        # the compiled anchor's extra ones come out of the positions left: past the model's
        # length they would index beyond its position table (a device-side assert on a GPU).
        warmup = min(3 + anchor.extra_warmup, cfg.n_positions - L - steps)
        if warmup < 3:
            raise AnchorError(f"context {L} + {steps} steps leaves the {cfg.n_positions}-position model "
                              "no room for warm-up steps: give gpt2 bench-sample a longer --seq-len")
        cache = anchor.new_cache(B, L + warmup + steps)
        anchor.fill_random(cache, B, L)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        nxt = torch.ones(B, 1, dtype=torch.long, device=dev)
        ms = []
        for s in range(warmup + steps):
            sync()
            t0 = time.perf_counter()
            nxt = anchor(nxt, cache, step=True).argmax(-1, keepdim=True)
            sync()
            if s >= warmup:
                ms.append(1e3 * (time.perf_counter() - t0))
        rec = {**base, "phase": "decode", "B": B, "context": L, "ms": statistics.median(ms),
               "ms_p90": quantile(ms, 0.9), "steps": steps,
               "kv_bytes": 2 * cfg.n_layer * B * H * (L + warmup + steps) * D * elem}
        if dev.type == "cuda":
            rec["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
        records.append(rec)
        print(f"  {anchor.name} decode B={B} context={L}: {rec['ms']:.2f} ms/token", flush=True)
    return records, checks


def run_torch(a, keel, torch):
    import transformers

    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    if a.dtype == "f32":
        torch.set_float32_matmul_precision("highest")  # no TF32: the f32 check is exact arithmetic's
    model, ref, dev, dtype = load_models(a, torch)
    with open(os.path.join(a.out, "hf", "bench_prompt.json")) as f:
        prompt = json.load(f)
    names = {"auto": ["eager", "compiled"] if dev.type == "cuda" else ["eager"]}.get(a.anchors, a.anchors.split(","))
    print(f"PyTorch {versions['torch']}, transformers {versions['transformers']}, {dev}, {a.dtype}; "
          f"anchors: {', '.join(names)}", flush=True)
    records, failed = [], False
    for name in names:
        if name not in ("eager", "compiled"):
            sys.exit(f"bench_sample.py: unknown anchor {name!r} (eager, compiled)")
        try:
            anchor = Anchor(model, dev, dtype, versions, compiled=name == "compiled")
            if anchor.compile_info:
                print(f"  compiled anchor: torch.compile {anchor.compile_info}, StaticCache", flush=True)
            with torch.no_grad():
                recs, checks = run_anchor(a, anchor, ref, keel, prompt, versions)
        except AnchorError as e:
            print(f"  {name} anchor: FAIL: {e}", flush=True)
            records.append({"bench": "sample", "impl": "torch" if name == "eager" else "torch-compiled",
                            "anchor": name, **versions, "error": str(e)})
            failed = True
            continue
        except Exception as e:  # noqa: BLE001  the compiled anchor where this torch cannot compile
            if name != "compiled" or a.anchors == "compiled":
                raise
            print(f"  compiled anchor unavailable here ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                  f"skipped", flush=True)
            records.append({"bench": "sample", "impl": "torch-compiled", "anchor": name, **versions,
                            "unavailable": f"{type(e).__name__}: {e}"[:2000]})
            continue
        records += recs
        failed = failed or not all(c["passed"] for c in checks)
    return records, failed


def table(keel, torch_records):
    def pick(recs, **kw):
        for r in recs:
            if all(r.get(k) == v for k, v in kw.items()):
                return r
        return None

    impls = [(i, n) for i, n in (("torch", "PyTorch"), ("torch-compiled", "PyTorch compiled"))
             if pick(torch_records, impl=i, phase="prefill") or pick(torch_records, impl=i, phase="decode")]
    head = "| batch | P | keel MHSA | keel LS |" + "".join(f" {n} MHSA | keel MHSA vs {n} |" for _, n in impls)
    head += "".join(f" check: {n} |" for _, n in impls)
    lines = ["## prefill (seconds for the prompt; lower is better)", "", head,
             "|" + "---|" * (4 + 3 * len(impls))]
    for p in [r for r in keel if r["phase"] == "prefill" and r["variant"] == "mhsa"]:
        ls = pick(keel, phase="prefill", variant="ls", B=p["B"])
        row = f"| {p['B']} | {p['P']} | {p['seconds']:.3f} | {ls['seconds']:.3f} |" if ls else \
            f"| {p['B']} | {p['P']} | {p['seconds']:.3f} | - |"
        cells = []
        for i, _ in impls:
            t = pick(torch_records, impl=i, phase="prefill", B=p["B"])
            row += f" {t['seconds']:.3f} | {t['seconds'] / p['seconds']:.2f}x |" if t else " - | - |"
            cells.append(sample_check.summary(t["check"]) if t else "-")
        lines.append(row + "".join(f" {c} |" for c in cells))
    head = "| batch | context | keel MHSA | keel LS |" + "".join(f" {n} MHSA |" for _, n in impls)
    head += " LS vs MHSA |" + "".join(f" keel MHSA vs {n} | LS vs {n} |" for _, n in impls)
    head += " KV MHSA | KV LS | KV LS/MHSA |"
    lines += ["", "## decode (ms per token, median (p90); KV cache MiB)", "", head,
              "|" + "---|" * (8 + 3 * len(impls))]
    for m in [r for r in keel if r["phase"] == "decode" and r["variant"] == "mhsa"]:
        ls = pick(keel, phase="decode", variant="ls", B=m["B"], context=m["context"])
        ts = [pick(torch_records, impl=i, phase="decode", B=m["B"], context=m["context"]) for i, _ in impls]
        if not ls or not any(ts):
            continue
        mib = 1 << 20
        row = f"| {m['B']} | {m['context']} | {m['ms']:.2f} ({m['ms_p90']:.2f}) | {ls['ms']:.2f} ({ls['ms_p90']:.2f}) |"
        row += "".join(f" {t['ms']:.2f} ({t['ms_p90']:.2f}) |" if t else " - |" for t in ts)
        row += f" {m['ms'] / ls['ms']:.2f}x |"
        row += "".join(f" {t['ms'] / m['ms']:.2f}x | {t['ms'] / ls['ms']:.2f}x |" if t else " - | - |" for t in ts)
        row += (f" {m['kv_bytes'] / mib:.1f} | {ls['kv_bytes'] / mib:.2f} | "
                f"{100 * ls['kv_bytes'] / m['kv_bytes']:.1f}% |")
        lines.append(row)
    lines += ["", "`A vs B` is B's time over A's: above 1x, A is faster. The check: apps/bench/sample_check.py."]
    v = next((r for r in torch_records if "transformers" in r), None)
    if v:
        lines += [f"PyTorch {v['torch']}, transformers {v['transformers']}."]
    for r in torch_records:
        if "unavailable" in r:
            lines += [f"The compiled anchor was unavailable: {r['unavailable'].splitlines()[0][:200]}"]
        if "error" in r:
            lines += [f"The {r['anchor']} anchor failed: {r['error']}"]
    return "\n".join(lines) + "\n"


def main():
    a = parse_args()
    os.makedirs(a.out, exist_ok=True)
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        torch = None
        print(f"bench_sample.py: no PyTorch anchor and no check: {e} (install torch and transformers, or use "
              f"apps/bench/bench_sample.sh); keel alone", flush=True)
    if not a.skip_keel:
        run_keel(a)
    if torch is None:
        return 0
    keel = read_jsonl(os.path.join(a.out, "keel.jsonl"))
    other = sorted({r["dtype"] for r in keel} - {a.dtype})
    if other:
        print(f"bench_sample.py: warning: keel's records are {', '.join(other)}, the anchors run {a.dtype} "
              f"(--skip-keel from another run?): the check compares unlike models", flush=True)
    torch_records, failed = run_torch(a, keel, torch)
    with open(os.path.join(a.out, "torch.jsonl"), "w") as f:
        for r in torch_records:
            f.write(json.dumps(r) + "\n")
    summary = table(keel, torch_records)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(summary)
    print("\n" + summary)
    if failed:
        print("bench_sample.py: an anchor does not compute keel's model (see the check above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
