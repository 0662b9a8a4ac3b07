#!/usr/bin/env python3
"""PyTorch baseline for `gpt2 train` throughput: a nanoGPT-style GPT-2, timed on random tokens.

A benchmark script, not part of keel: it imports torch, keel never does.

The model is keel's (nn/config.h presets), written the nanoGPT way: pre-LayerNorm blocks,
GELU (tanh form, as GPT-2), learned absolute positions, 4x MLP, bias and tied embeddings as the
preset says, no dropout.
  gpt2-124m  12 layers, 12 heads x 64, width 768, vocab 50257, bias, tied
  paper      6 layers, 6 heads x 32, width 192, vocab 10000, no bias, untied (arXiv 2505.15548)
Attention:
  mhsa  F.scaled_dot_product_attention(is_causal=True) with the FlashAttention backend forced
  ls    LS-attention (local heads first, window w, then the global heads) as SDPA with an explicit
        additive mask of the allowed pairs (1, H, T, T): flash takes no mask, so this runs on the
        memory-efficient backend, which computes every (query, key) pair;
        --ls-impl flex uses a compiled FlexAttention block mask instead (block-sparse).
Training step: bf16 autocast over fp32 master weights, fused AdamW (lr 6e-4, betas (0.9, 0.95),
weight decay 0.1 on matrices, eps 1e-8), global-norm clip 1.0, loss.item() every --log-every
steps (default 1; as keel's trainer, which reads a step's scalars only when it logs it).
--compile wraps the model in torch.compile.

Timing: --warmup steps, then --steps timed steps, in groups of --log-every steps between two
synchronisations of a host clock (the group's loss.item() is its one wait), so it is the whole
step, data included (random tokens drawn on the device); a step's time is its group's over the
group's steps. tokens/s is B*T / step time (median over the timed groups; the mean is in the
JSON). MFU uses keel's FLOP
count (apps/gpt2/train/setup.cpp, train_flops_per_token, ported below): 3 x forward, forward =
every matmul (2 FLOPs per MAC) + attention over the keys each head's window allows (4*D per key)
+ the lm_head; and keel's peak (peak_flops: 989 TFLOP/s bf16 dense for H100/H200, 312 for A100).

  train_baseline.py --json out.jsonl --run gpt2-124m:mhsa:16:1024 --run paper:ls:32:2048 [--compile]

Each --run is PRESET:ATTENTION:BATCH:SEQ_LEN. JSON lines (appended, one per run):
  {"bench": "train", "impl": "torch"|"torch-compile", "status": "ok"|"oom"|"error", "error"?,
   "preset", "attention", "attn_backend", "B", "T", "vocab", "params", "steps", "warmup",
   "tokens_per_s", "tokens_per_s_mean", "step_ms", "mfu", "flops_per_token", "peak_flops",
   "mem_bytes", "final_loss", "device", "torch"}
"""

import argparse
import json
import math
import sys
import time

PRESETS = {
    "gpt2-124m": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, bias=True, tie=True,
                      ls_local_heads=11, ls_window=50),
    "paper": dict(n_layer=6, n_head=6, n_embd=192, vocab_size=10000, bias=False, tie=False,
                  ls_local_heads=5, ls_window=50),
}


def windows_of(cfg, attention):
    """Per-head windows as GPT2Config::attention_spec(): local heads first, 0 = full causal."""
    H = cfg["n_head"]
    if attention == "ls":
        return [cfg["ls_window"]] * cfg["ls_local_heads"] + [0] * (H - cfg["ls_local_heads"])
    return [0] * H


def train_flops_per_token(cfg, windows, T):
    """Port of keel::app::train_flops_per_token (apps/gpt2/train/setup.cpp)."""
    C, V = float(cfg["n_embd"]), float(cfg["vocab_size"])
    D = C / cfg["n_head"]
    per_layer = 2 * C * 3 * C + 2 * C * C + 2 * 2 * C * 4 * C
    for w in windows:
        if w == 0:
            keys = T * (T + 1) / 2
        else:  # sum over i of min(i + 1, w)
            m = min(w, T)
            keys = m * (m + 1) / 2 + (T - m) * w
        per_layer += 4 * D * keys / T
    forward = cfg["n_layer"] * per_layer + 2 * C * V
    return 3 * forward


def peak_flops(name, half=True):
    """Port of keel::app::peak_flops_of: dense data-sheet peaks by device name, 0 when unknown."""
    peak = None
    if "MIG" in name:
        peak = None
    elif "H100" in name or "H200" in name:
        if "PCIe" in name:
            peak = (756e12, 51e12)
        elif "NVL" in name:
            peak = (835e12, 60e12)
        elif "H200" in name or "HBM3" in name or "SXM" in name:
            peak = (989e12, 67e12)
    elif "A100" in name:
        peak = (312e12, 19.5e12)
    if peak is None:
        return 0.0
    return peak[0] if half else peak[1]


def build_model(torch, cfg, attention, T, ls_impl, use_sdpa_context):
    nn = torch.nn
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel

    C, H, L, V, bias = cfg["n_embd"], cfg["n_head"], cfg["n_layer"], cfg["vocab_size"], cfg["bias"]
    windows = windows_of(cfg, attention)

    flex = block_mask = None
    attn_mask = None
    if attention == "ls":
        if ls_impl == "flex":
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            win = torch.tensor(windows, device="cuda", dtype=torch.int64)

            def mask_mod(b, h, q_idx, kv_idx):
                w = win[h]
                return (kv_idx <= q_idx) & ((w == 0) | (q_idx - kv_idx < w))

            block_mask = create_block_mask(mask_mod, B=None, H=H, Q_LEN=T, KV_LEN=T, device="cuda")
            flex = torch.compile(flex_attention)
        else:
            i = torch.arange(T, device="cuda").view(T, 1)
            j = torch.arange(T, device="cuda").view(1, T)
            causal = j <= i
            allowed = torch.stack([causal if w == 0 else causal & (j > i - w) for w in windows]).unsqueeze(0)
            attn_mask = torch.zeros(allowed.shape, device="cuda", dtype=torch.bfloat16)
            attn_mask.masked_fill_(~allowed, float("-inf"))

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(C, 3 * C, bias=bias)
            self.c_proj = nn.Linear(C, C, bias=bias)

        def forward(self, x):
            B_, T_, _ = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B_, T_, H, C // H).transpose(1, 2) for t in (q, k, v))
            if attention == "mhsa":
                if use_sdpa_context:
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                else:
                    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            elif flex is not None:
                y = flex(q, k, v, block_mask=block_mask)
            else:
                m = attn_mask.to(q.dtype)
                if use_sdpa_context:
                    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
                        y = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
                else:
                    y = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B_, T_, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(C, 4 * C, bias=bias)
            self.c_proj = nn.Linear(4 * C, C, bias=bias)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, bias=bias)
            self.attn = SelfAttention()
            self.ln_2 = nn.LayerNorm(C, bias=bias)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(C, bias=bias)
            self.lm_head = nn.Linear(C, V, bias=False)
            if cfg["tie"]:
                self.lm_head.weight = self.wte.weight
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
                    torch.nn.init.normal_(p, mean=0.0, std=std)
                else:
                    torch.nn.init.zeros_(p) if name.endswith("bias") else torch.nn.init.ones_(p)

        def forward(self, idx, targets):
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))

    backend = "flash" if attention == "mhsa" else ("flex" if flex is not None else "masked-efficient")
    return GPT().cuda(), backend


def run_one(torch, spec, args, emit):
    preset, attention, B, T = spec.split(":")
    B, T = int(B), int(T)
    if preset not in PRESETS or attention not in ("mhsa", "ls"):
        raise SystemExit(f"bad --run {spec!r}: PRESET (gpt2-124m|paper):ATTENTION (mhsa|ls):BATCH:SEQ_LEN")
    cfg = dict(PRESETS[preset])
    if args.vocab:
        cfg["vocab_size"] = args.vocab
    name = torch.cuda.get_device_name(0)
    impl = "torch-compile" if args.compile else "torch"
    windows = windows_of(cfg, attention)
    fpt = train_flops_per_token(cfg, windows, T)
    peak = peak_flops(name)
    rec = {"bench": "train", "impl": impl, "preset": preset, "attention": attention, "B": B, "T": T,
           "vocab": cfg["vocab_size"], "device": name, "torch": torch.__version__, "steps": args.steps,
           "warmup": args.warmup, "flops_per_token": fpt, "peak_flops": peak}
    model = opt = None
    try:
        torch.manual_seed(1337)
        torch.cuda.reset_peak_memory_stats()
        model, backend = build_model(torch, cfg, attention, T, args.ls_impl, use_sdpa_context=not args.compile)
        rec["attn_backend"] = backend
        rec["params"] = sum(p.numel() for p in model.parameters())
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
        step_fn = torch.compile(model) if args.compile else model
        V = cfg["vocab_size"]
        times, loss_v, n, total = [], float("nan"), args.log_every, args.warmup + args.steps
        for step in range(total):
            if step % n == 0:  # a group's first step
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            data = torch.randint(0, V, (B, T + 1), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_fn(data[:, :-1], data[:, 1:])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if (step + 1) % n == 0 or step + 1 == total:  # a group's last step: its one host wait
                loss_v = loss.item()
                torch.cuda.synchronize()
                k = step % n + 1  # the group's steps
                if step + 1 - k >= args.warmup:
                    times.append((time.perf_counter() - t0) / k)
        times.sort()
        med = times[len(times) // 2] if len(times) % 2 else 0.5 * (times[len(times) // 2 - 1] + times[len(times) // 2])
        tps = B * T / med
        rec.update(status="ok", tokens_per_s=tps, tokens_per_s_mean=B * T * len(times) / sum(times),
                   step_ms=med * 1e3, mfu=(fpt * tps / peak) if peak else None,
                   mem_bytes=torch.cuda.max_memory_allocated(), final_loss=loss_v)
        print(f"{impl:<14} {preset:<10} {attention:<5} {backend:<17} B={B:<3} T={T:<5} | {med * 1e3:8.1f} ms/step "
              f"| {tps:12.0f} tok/s | MFU {100 * rec['mfu'] if peak else float('nan'):5.1f}% "
              f"| {rec['mem_bytes'] / 2**30:6.1f} GiB | loss {loss_v:.3f}", flush=True)
    except torch.cuda.OutOfMemoryError as e:
        rec.update(status="oom", error=str(e).splitlines()[0])
        print(f"{impl} {spec}: out of memory", flush=True)
    except Exception as e:  # record and go on to the next run
        rec.update(status="error", error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        print(f"{impl} {spec}: {rec['error']}", flush=True)
    emit(rec)
    del model, opt
    torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", action="append", default=[], help="PRESET:ATTENTION:BATCH:SEQ_LEN (repeatable)")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation, allocator warm-up)")
    p.add_argument("--log-every", type=int, default=1, help="read the loss (one host wait) every N steps")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--ls-impl", choices=["masked", "flex"], default="masked")
    p.add_argument("--vocab", type=int, default=0, help="override the preset's vocabulary size")
    p.add_argument("--json", default="", help="append JSON lines here")
    args = p.parse_args()
    if args.log_every < 1 or args.steps < args.log_every:
        p.error("--log-every must be at least 1 and at most --steps")
    runs = args.run or ["gpt2-124m:mhsa:16:1024", "paper:mhsa:32:2048", "paper:ls:32:2048"]

    import torch

    if not torch.cuda.is_available():
        print("train_baseline: no CUDA device here; nothing to measure")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    out = open(args.json, "a") if args.json else None

    def emit(rec):
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()

    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, bf16 autocast, "
          f"{args.warmup} warm-up + {args.steps} timed steps, the loss read every {args.log_every}, median step time")
    for spec in runs:
        run_one(torch, spec, args, emit)
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
