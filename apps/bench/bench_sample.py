#!/usr/bin/env python3
"""keel's generation latency beside PyTorch's, from one command: `gpt2 bench-sample` and its anchor.

A benchmark script, not part of keel: it imports torch and transformers, keel never does. Run it
with a Python that has them (apps/bench/bench_sample.sh makes one, in a virtual environment):

  python3 apps/bench/bench_sample.py --gpt2 build/cpu/apps/gpt2/gpt2 --out runs/bench-sample \
      [--device cpu|cuda] [--dtype f32|bf16|f16] [-- more flags for gpt2 bench-sample]

What it does:
  1. `gpt2 bench-sample --preset paper --variants mhsa,ls --json OUT/keel.jsonl --save-hf OUT/hf`
     plus the flags after `--`: keel's prefill and decode measurements (docs/inference.md), the
     model's weights as a Hugging Face GPT-2 directory and the prompt's token ids.
  2. The anchor: transformers' GPT2LMHeadModel from OUT/hf (SDPA attention, its DynamicCache),
     the same measurements on the same device, dtype, prompt and batch sizes -> OUT/torch.jsonl.
     The paper's model has no biases: the bias tensors transformers expects are set to zero, which
     is the same model. Hugging Face has no LS-attention, so the anchor is MHSA; keel's LS runs
     beside it.
       prefill  model(prompt, logits_to_keep=1) on a fresh cache (what generate() does first),
                then greedy tokens compared with keel's: the two must agree (same weights, same model)
       decode   a DynamicCache holding `context` positions of random keys and values (as keel's
                fill_random), then steps of model(next token, cache) + argmax, as generate() loops
  3. A side-by-side table, printed and written to OUT/summary.md.
Timing: each step is timed alone (CUDA: synchronised); the median and p90 of the steps are reported.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt2", required=True, help="the gpt2 binary")
    ap.add_argument("--out", default="runs/bench-sample", help="output folder")
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--dtype", default="f32", help="f32 | bf16 | f16")
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


def run_torch(a, keel):
    import torch
    from transformers import DynamicCache, GPT2LMHeadModel

    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]
    dev = torch.device("cuda" if a.device.startswith("cuda") else "cpu")
    hf = os.path.join(a.out, "hf")
    model, info = GPT2LMHeadModel.from_pretrained(hf, output_loading_info=True, attn_implementation="sdpa")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in info["missing_keys"]:
                if not name.endswith(".bias"):
                    sys.exit(f"bench_sample.py: {hf} lacks {name}, which is not a bias")
                p.zero_()  # keel's bias-free model is GPT-2 with zero biases
    model = model.to(dev, dtype).eval()
    cfg = model.config
    H, D = cfg.n_head, cfg.n_embd // cfg.n_head
    with open(os.path.join(hf, "bench_prompt.json")) as f:
        prompt = json.load(f)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    elem = torch.tensor([], dtype=dtype).element_size()

    def step(ids, cache, **kw):
        try:
            out = model(ids, cache=cache, use_cache=True, **kw)
        except TypeError:  # transformers before `cache` was the keyword
            out = model(ids, past_key_values=cache, use_cache=True, **kw)
        return out.logits[:, -1:, :].argmax(-1)

    def new_cache():
        try:
            return DynamicCache(config=cfg)
        except TypeError:
            return DynamicCache()

    prefills = [r for r in keel if r["phase"] == "prefill" and r["variant"] == "mhsa"]
    decodes = [r for r in keel if r["phase"] == "decode" and r["variant"] == "mhsa"]
    steps = decodes[0]["steps"] if decodes else 20
    records = []
    base = {"bench": "sample", "impl": "torch", "variant": "mhsa", "device": str(dev), "dtype": a.dtype,
            "torch": torch.__version__, "threads": torch.get_num_threads()}
    with torch.no_grad():
        for p in prefills:
            B, P = p["B"], p["P"]
            ids = torch.tensor([prompt[:P]] * B, device=dev)
            times = []
            for _ in range(p["reps"]):
                cache = new_cache()
                sync()
                t0 = time.perf_counter()
                try:
                    nxt = step(ids, cache, logits_to_keep=1)
                except TypeError:
                    nxt = step(ids, cache)
                sync()
                times.append(time.perf_counter() - t0)
            tokens = [int(nxt[0, 0])]
            for _ in range(len(p["greedy"]) - 1):
                nxt = step(nxt, cache)
                tokens.append(int(nxt[0, 0]))
            records.append({**base, "phase": "prefill", "B": B, "P": P, "seconds": statistics.median(times),
                            "tokens_per_s": B * P / statistics.median(times), "greedy": tokens,
                            "greedy_agrees": tokens == p["greedy"]})
            print(f"  torch prefill B={B} P={P}: {statistics.median(times):.3f} s; greedy tokens "
                  f"{'agree with keel' if tokens == p['greedy'] else 'DIFFER from keel'}", flush=True)
        for d in decodes:
            B, L = d["B"], d["context"]
            warmup = 3
            cache = new_cache()
            for layer in range(cfg.n_layer):
                cache.update(torch.randn(B, H, L, D, device=dev, dtype=dtype),
                             torch.randn(B, H, L, D, device=dev, dtype=dtype), layer)
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            nxt = torch.ones(B, 1, dtype=torch.long, device=dev)
            ms = []
            for s in range(warmup + steps):
                sync()
                t0 = time.perf_counter()
                nxt = step(nxt, cache)
                sync()
                if s >= warmup:
                    ms.append(1e3 * (time.perf_counter() - t0))
            rec = {**base, "phase": "decode", "B": B, "context": L, "ms": statistics.median(ms),
                   "ms_p90": quantile(ms, 0.9), "steps": steps,
                   "kv_bytes": 2 * cfg.n_layer * B * H * (L + warmup + steps) * D * elem}
            if dev.type == "cuda":
                rec["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
            records.append(rec)
            print(f"  torch decode B={B} context={L}: {rec['ms']:.2f} ms/token", flush=True)
    return records


def table(keel, torch_records):
    def pick(recs, **kw):
        for r in recs:
            if all(r.get(k) == v for k, v in kw.items()):
                return r
        return None

    lines = ["## prefill (seconds for the prompt; lower is better)", "",
             "| batch | P | keel MHSA | keel LS | PyTorch MHSA | keel MHSA vs PyTorch | greedy tokens agree |",
             "|---|---|---|---|---|---|---|"]
    for p in [r for r in keel if r["phase"] == "prefill" and r["variant"] == "mhsa"]:
        ls = pick(keel, phase="prefill", variant="ls", B=p["B"])
        t = pick(torch_records, phase="prefill", B=p["B"])
        lines.append(f"| {p['B']} | {p['P']} | {p['seconds']:.3f} | {ls['seconds']:.3f} | "
                     f"{t['seconds']:.3f} | {t['seconds'] / p['seconds']:.2f}x | {t['greedy_agrees']} |"
                     if ls and t else f"| {p['B']} | {p['P']} | {p['seconds']:.3f} | - | - | - | - |")
    lines += ["", "## decode (ms per token, median (p90); KV cache MiB)", "",
              "| batch | context | keel MHSA | keel LS | PyTorch MHSA | LS vs MHSA | keel MHSA vs PyTorch | "
              "LS vs PyTorch | KV MHSA | KV LS | KV LS/MHSA |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in [r for r in keel if r["phase"] == "decode" and r["variant"] == "mhsa"]:
        ls = pick(keel, phase="decode", variant="ls", B=m["B"], context=m["context"])
        t = pick(torch_records, phase="decode", B=m["B"], context=m["context"])
        if not ls or not t:
            continue
        mib = 1 << 20
        lines.append(
            f"| {m['B']} | {m['context']} | {m['ms']:.2f} ({m['ms_p90']:.2f}) | {ls['ms']:.2f} ({ls['ms_p90']:.2f}) | "
            f"{t['ms']:.2f} ({t['ms_p90']:.2f}) | {m['ms'] / ls['ms']:.2f}x | {t['ms'] / m['ms']:.2f}x | "
            f"{t['ms'] / ls['ms']:.2f}x | {m['kv_bytes'] / mib:.1f} | {ls['kv_bytes'] / mib:.2f} | "
            f"{100 * ls['kv_bytes'] / m['kv_bytes']:.1f}% |")
    lines += ["", "`A vs B` is B's time over A's: above 1x, A is faster."]
    return "\n".join(lines) + "\n"


def main():
    a = parse_args()
    os.makedirs(a.out, exist_ok=True)
    if not a.skip_keel:
        run_keel(a)
    keel = read_jsonl(os.path.join(a.out, "keel.jsonl"))
    print("PyTorch (transformers) on the same model:", flush=True)
    torch_records = run_torch(a, keel)
    with open(os.path.join(a.out, "torch.jsonl"), "w") as f:
        for r in torch_records:
            f.write(json.dumps(r) + "\n")
    summary = table(keel, torch_records)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(summary)
    print("\n" + summary)


if __name__ == "__main__":
    main()
