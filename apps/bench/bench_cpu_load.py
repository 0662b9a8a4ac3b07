#!/usr/bin/env python3
"""keel on a busy CPU: decoding and training with 1 and N threads, idle and beside busy processes,
with PyTorch's eager CPU run of the same work side by side.

A benchmark script, not part of keel: it imports torch (and transformers for the decode anchor),
keel never does. Without them it says so and prints keel alone.

  python3 apps/bench/bench_cpu_load.py [--gpt2 build/cpu/apps/gpt2/gpt2] [--loads 0,2] [--reps 3]
      [--threads N] [--out runs/bench-cpu-load] [--json FILE]

Work:
  decode  the paper's model (6 layers, 6 heads of 32, width 192, vocabulary 10000, f32, random
          weights), batch 1, one token at a time against a cache of --context positions (3600):
          keel's `gpt2 bench-sample` (MHSA), and transformers' GPT2LMHeadModel with its
          DynamicCache filled with as many random positions, as apps/bench/bench_sample.py runs it;
          milliseconds per token, the median of the timed steps.
  train   the demo-shaped step (4 layers, 4 heads of 32, width 128, T 256, B 8, vocabulary 10000,
          tied embeddings, f32): keel's `gpt2 train` on the bundled Austen corpus (prepared once
          with a 10000-token vocabulary), and a nanoGPT-style PyTorch model of the same shape with
          AdamW and gradient clipping on random tokens; tokens/s, the median of the timed steps.
Load: --loads lists how many busy processes (a Python loop each, or --load-cmd) run beside the
measured one; 0 is the idle machine. Threads: 1, and N (keel's default: the CPUs it may use;
torch's: its own default), set through KEEL_NUM_THREADS and torch.set_num_threads. Each cell is
the median of --reps runs; runs of one cell alternate with the others so that drift spreads evenly.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

DECODE = dict(n_layer=6, n_head=6, n_embd=192, vocab=10000)
TRAIN = dict(n_layer=4, n_head=4, n_embd=128, vocab=10000, T=256, B=8)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt2", default=os.path.join(ROOT, "build/cpu/apps/gpt2/gpt2"))
    ap.add_argument("--loads", default="0,2", help="busy processes beside the measured one, comma-separated")
    ap.add_argument("--load-cmd", default="", help="the command of one busy process (default: a Python loop)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="the N of the N-thread columns")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--context", type=int, default=3600, help="decode: positions in the cache")
    ap.add_argument("--decode-steps", type=int, default=100)
    ap.add_argument("--train-steps", type=int, default=12, help="train: steps per run (the first 2 untimed)")
    ap.add_argument("--work", default="decode,train")
    ap.add_argument("--out", default=os.path.join(ROOT, "runs/bench-cpu-load"))
    ap.add_argument("--json", default="", help="append one JSON line per cell here")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)  # torch-decode | torch-train
    return ap.parse_args()


# ---- PyTorch workers, each run as a fresh process: python3 bench_cpu_load.py --worker ... ----

def torch_decode(a):
    import torch
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=DECODE["n_layer"], n_head=DECODE["n_head"], n_embd=DECODE["n_embd"],
                     vocab_size=DECODE["vocab"], n_positions=a.context + a.decode_steps + 16)
    model = GPT2LMHeadModel(cfg).eval()
    if hasattr(transformers, "DynamicCache"):
        sys.path.insert(0, HERE)
        import sample_anchor  # the decode anchor's calling conventions, per transformers version
        versions = {"torch": torch.__version__, "transformers": transformers.__version__}
        anchor = sample_anchor.Anchor(model, torch.device("cpu"), torch.float32, versions, compiled=False)
        cache = anchor.new_cache(1, a.context + a.decode_steps + 8)
        anchor.fill_random(cache, 1, a.context)
        step = lambda ids: anchor(ids, cache, step=True)  # noqa: E731
    else:  # transformers before 4.36: the cache is a tuple of (key, value) per layer, concatenated each step
        H, D = cfg.n_head, cfg.n_embd // cfg.n_head
        state = {"past": tuple((torch.randn(1, H, a.context, D), torch.randn(1, H, a.context, D))
                               for _ in range(cfg.n_layer))}

        def step(ids):
            out = model(ids, past_key_values=state["past"], use_cache=True)
            state["past"] = out.past_key_values
            return out.logits[:, -1, :]
    ms = []
    with torch.no_grad():
        nxt = torch.ones(1, 1, dtype=torch.long)
        for s in range(3 + a.decode_steps):
            t0 = time.perf_counter()
            nxt = step(nxt).argmax(-1, keepdim=True)
            if s >= 3:
                ms.append(1e3 * (time.perf_counter() - t0))
    return {"ms": statistics.median(ms), "torch": torch.__version__}


def torch_train(a):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    L, H, C, V, T, B = (TRAIN[k] for k in ("n_layer", "n_head", "n_embd", "vocab", "T", "B"))
    mask = torch.full((T, T), float("-inf")).triu(1)

    def attend(q, k, v):  # F.scaled_dot_product_attention where it exists (torch >= 2.0), else nanoGPT's
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.softmax(q @ k.transpose(-2, -1) / (C // H) ** 0.5 + mask, dim=-1) @ v

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            y = attend(q, k, v).transpose(1, 2).reshape(B, T, C)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for b in self.h:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied, as keel's demo model
            return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))

    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    times = []
    for step in range(a.train_steps):
        data = torch.randint(0, V, (B, T + 1))
        t0 = time.perf_counter()
        loss = model(data[:, :-1], data[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        if step >= 2:
            times.append(time.perf_counter() - t0)
    return {"tokens_per_s": B * T / statistics.median(times), "torch": torch.__version__}


def worker_main(a):
    import torch
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    out = torch_decode(a) if a.worker == "torch-decode" else torch_train(a)
    print(json.dumps(out))
    return 0


# ---- the driver ----

def run_json(cmd, env=None):
    """Runs cmd, returns its last stdout line parsed as JSON (None when it failed)."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"  failed: {' '.join(cmd[:3])} ...: {p.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def keel_env(threads):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "KEEL_NUM_THREADS")}
    env["KEEL_NUM_THREADS"] = str(threads)
    return env


def keel_decode(a, threads, tmp):
    path = os.path.join(tmp, "decode.jsonl")
    if os.path.exists(path):
        os.remove(path)
    cmd = [a.gpt2, "bench-sample", "--preset", "paper", "--variants", "mhsa", "--device", "cpu", "--contexts",
           str(a.context), "--batch-sizes", "1", "--prompt-tokens", "16", "--prefill-reps", "1", "--steps",
           str(a.decode_steps), "--warmup", "5", "--json", path]
    if subprocess.run(cmd, env=keel_env(threads), capture_output=True).returncode != 0:
        return None
    recs = [json.loads(line) for line in open(path)]
    return next(r["ms"] for r in recs if r.get("phase") == "decode")


def keel_data(a):
    data = os.path.join(a.out, "data", "austen-10k")
    if not os.path.exists(os.path.join(data, "meta.json")):
        subprocess.run([a.gpt2, "prepare", "-q", "-i", os.path.join(ROOT, "data/corpora/austen_6novels.txt.xz"), "-o",
                        data, "--train-vocab", "10000"], check=True)
    return data


def keel_train(a, threads, tmp, data):
    run = os.path.join(tmp, f"train-{threads}")
    subprocess.run(["rm", "-rf", run], check=True)
    cmd = [a.gpt2, "train", "--data", data, "--preset", "tiny", "--n-layer", "4", "--n-head", "4", "--n-embd", "128",
           "--seq-len", "256", "--batch-size", "8", "--max-steps", str(a.train_steps), "--warmup-steps", "2",
           "--val-every", "0", "--val-batches", "1", "--ckpt-every", "0", "--device", "cpu", "--run-dir", run]
    if subprocess.run(cmd, env=keel_env(threads), capture_output=True).returncode != 0:
        return None
    recs = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    tps = [r["tokens_per_s"] for r in recs if r.get("kind") == "train" and r["step"] > 2]
    return statistics.median(tps)


TORCH_VERSION = ["PyTorch"]  # "PyTorch 1.13.1" once a worker has said


def torch_cell(a, work, threads):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", f"torch-{work}", "--threads", str(threads),
           "--context", str(a.context), "--decode-steps", str(a.decode_steps), "--train-steps", str(a.train_steps)]
    r = run_json(cmd)
    if r is None:
        return None
    TORCH_VERSION[0] = f"PyTorch {r['torch']}"
    return r["ms"] if work == "decode" else r["tokens_per_s"]


def start_load(a, n):
    cmd = a.load_cmd or f"{sys.executable} -c 'while True: pass'"
    return [subprocess.Popen(cmd, shell=True, start_new_session=True) for _ in range(n)]


def stop_load(procs):
    for p in procs:
        os.killpg(p.pid, 9)
        p.wait()


def has_torch(modules):
    return subprocess.run([sys.executable, "-c", f"import {modules}"], capture_output=True).returncode == 0


def measure(a, work, load, cells, tmp, data):
    """{(impl, threads): median} for one work at one load."""
    got = {c: [] for c in cells}
    procs = start_load(a, load)
    try:
        time.sleep(1.0 if load else 0)  # the busy processes up to speed
        for _ in range(a.reps):
            for impl, t in cells:
                if impl == "keel":
                    v = keel_decode(a, t, tmp) if work == "decode" else keel_train(a, t, tmp, data)
                else:
                    v = torch_cell(a, work, t)
                if v is not None:
                    got[(impl, t)].append(v)
    finally:
        stop_load(procs)
    return {c: (statistics.median(v) if v else None) for c, v in got.items()}


def fmt(v, work):
    return "-" if v is None else (f"{v:.2f} ms" if work == "decode" else f"{v:,.0f} tok/s")


def ratio(x, y, work):
    """How many times faster x is than y (decode: times, train: rates)."""
    if x is None or y is None:
        return "-"
    return f"{(y / x if work == 'decode' else x / y):.2f}x"


def print_table(work, n, rows):
    print(f"\n{work}: " + ("ms per token (lower is better)" if work == "decode" else "tokens/s (higher is better)"))
    pt = TORCH_VERSION[0]
    print(f"| load | keel 1 thread | keel {n} threads | {pt} 1 thread | {pt} {n} threads | "
          f"keel {n} vs 1 | keel {n} vs PyTorch {n} |")
    print("|---|---|---|---|---|---|---|")
    for load, r in rows:
        k1, kn, t1, tn = r.get(("keel", 1)), r.get(("keel", n)), r.get(("torch", 1)), r.get(("torch", n))
        print(f"| {load} busy | {fmt(k1, work)} | {fmt(kn, work)} | {fmt(t1, work)} | {fmt(tn, work)} | "
              f"{ratio(kn, k1, work)} | {ratio(kn, tn, work)} |")


def main():
    a = parse_args()
    if a.worker:
        return worker_main(a)
    if not os.access(a.gpt2, os.X_OK):
        sys.exit(f"bench_cpu_load.py: no gpt2 at {a.gpt2} (cmake --preset cpu && cmake --build --preset cpu)")
    os.makedirs(a.out, exist_ok=True)
    n, works, loads = a.threads, a.work.split(","), [int(x) for x in a.loads.split(",")]
    have = {"decode": has_torch("torch, transformers"), "train": has_torch("torch")}
    for w in works:
        if not have[w]:
            print(f"note: PyTorch{' and transformers' if w == 'decode' else ''} not importable by {sys.executable}: "
                  f"{w} prints keel alone (pip install torch transformers)")
    print(f"{os.cpu_count()} CPUs; N = {n}; loads {loads}; median of {a.reps} runs per cell", flush=True)
    data = keel_data(a) if "train" in works else None
    with tempfile.TemporaryDirectory(dir=a.out) as tmp:
        for w in works:
            cells = [("keel", 1), ("keel", n)] + ([("torch", 1), ("torch", n)] if have[w] else [])
            rows = []
            for load in loads:
                r = measure(a, w, load, cells, tmp, data)
                rows.append((load, r))
                if a.json:
                    with open(a.json, "a") as f:
                        f.write(json.dumps({"work": w, "load": load, "threads": n,
                                            **{f"{i}_{t}": v for (i, t), v in r.items()}}) + "\n")
            print_table(w, n, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
