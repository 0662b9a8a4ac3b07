#!/usr/bin/env python3
"""PyTorch baseline for bench_attention: the same attention configs, timed the same way.

A benchmark script, not part of keel: it imports torch, keel never does.

Configs (as bench_attention): bf16, H = 6 heads, head dims D = 32/64/128, T = 1k..16k, batch
B = round(rows / (H * T)) with rows = 2^21 query rows by default (or a fixed --batch), and the head patterns
  mhsa       all 6 heads full causal
  ls_w50     5 local heads of window 50 first, then 1 global head (the paper's LS layer)
  ls_w100    the same with window 100
  local_w50  6 local heads of window 50
where a local head of window w lets query i see keys j with i - w < j <= i.

Implementations (--impls):
  torch-flash   mhsa only: F.scaled_dot_product_attention(is_causal=True) with the FlashAttention
                backend forced (torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)).
                PyTorch's flash backend has no per-head window, so it cannot run LS itself.
  torch-masked  the window patterns (and mhsa with --masked-mhsa): SDPA with an explicit mask of
                the allowed pairs, shape (1, H, T, T), built once per config outside the timed
                region. A mask rules out the flash backend; SDPA then uses the memory-efficient
                backend (which reads the mask for every tile and skips none: it costs as much
                as full non-causal attention) and, if that refuses, the math backend (which
                materialises the (B, H, T, T) scores; run only when they fit --max-math-gb).
                The record's "backend" says which one ran. By default the mask is passed as an
                additive bf16 bias (0 allowed, -inf not), which is what SDPA turns a boolean
                mask into; --bool-mask passes the boolean mask and so also times that
                conversion inside every call.
  torch-flex    (opt-in) FlexAttention with a block mask from the same windows, compiled with
                torch.compile: block-sparse, so it skips tiles like keel does. Compiles once per
                shape (tens of seconds each): use a short --seqs list.

FLOPs count only the allowed (query, key) pairs, as bench_attention: forward = 4 * D per pair
per (b, h); forward+backward = 3.5 x forward (FlashAttention's convention). The masked
implementation does more work than that (every pair), so its TFLOP/s is "useful" TFLOP/s.

Timing: 2 warm-up calls, one probe to size the run, then reps calls (about --budget-ms of
device time, within [--min-reps, --max-reps]) each between two CUDA events; the median is
reported, min and mean in the JSON. Forward runs under torch.no_grad(); forward+backward is
out = attn(q, k, v); out.backward(dout) with the gradients of q, k, v set to None before each
call, so no accumulation kernel is timed.

JSON lines (--json PATH), one per (impl, config, pass), in bench_attention's schema:
  {"bench": "attention", "impl", "backend", "status": "ok"|"oom"|"skipped"|"error", "error"?,
   "device", "dtype": "bf16", "pattern", "windows", "B", "H", "T", "D", "pass": "fwd"|"fwd_bwd",
   "ms", "ms_min", "ms_mean", "reps", "flops", "tflops", "us_per_seq"}
"""

import argparse
import json
import math
import sys
import time


def pattern_windows(name, H):
    """Windows per head, local heads first (0 = full causal)."""
    if name == "mhsa":
        return [0] * H
    if name.startswith("ls_w"):
        return [int(name[4:])] * (H - 1) + [0]
    if name.startswith("local_w"):
        return [int(name[7:])] * H
    raise ValueError(f"unknown pattern {name!r}: use mhsa, ls_wN or local_wN")


def sum_keys(T, w):
    """Sum over queries i = 0..T-1 of the keys query i sees under window w."""
    if w <= 0 or w >= T:
        return T * (T + 1) / 2
    return w * (w + 1) / 2 + (T - w) * w


def forward_flops(B, T, D, windows):
    return 4.0 * D * B * sum(sum_keys(T, w) for w in windows)


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def time_calls(torch, f, args):
    """Median/min/mean ms of f over reps calls, each between two CUDA events."""
    for _ in range(args.warmup):
        f()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    f()
    torch.cuda.synchronize()
    probe_ms = (time.perf_counter() - t0) * 1e3
    reps = max(args.min_reps, min(args.max_reps, math.ceil(args.budget_ms / max(probe_ms, 1e-3))))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, stop in events:
        start.record()
        f()
        stop.record()
    torch.cuda.synchronize()
    ms = [start.elapsed_time(stop) for start, stop in events]
    return {"ms": median(ms), "ms_min": min(ms), "ms_mean": sum(ms) / reps, "reps": reps}


def window_mask(torch, T, windows, device):
    """(1, H, T, T) bool: True where query i may see key j."""
    i = torch.arange(T, device=device).view(T, 1)
    j = torch.arange(T, device=device).view(1, T)
    causal = j <= i
    heads = []
    for w in windows:
        heads.append(causal if w <= 0 or w >= T else causal & (j > i - w))
    return torch.stack(heads).unsqueeze(0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default="", help="write JSON lines here")
    p.add_argument("--dims", default="32,64,128")
    p.add_argument("--seqs", default="1024,2048,4096,8192,16384")
    p.add_argument("--patterns", default="mhsa,ls_w50,ls_w100,local_w50")
    p.add_argument("--impls", default="torch-flash,torch-masked", help="torch-flash,torch-masked,torch-flex")
    p.add_argument("--rows", type=int, default=1 << 21, help="query rows B*H*T per config (about)")
    p.add_argument("--batch", type=int, default=0, help="a fixed batch B instead of --rows (0: from --rows)")
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--budget-ms", type=float, default=300)
    p.add_argument("--min-reps", type=int, default=3)
    p.add_argument("--max-reps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--masked-mhsa", action="store_true", help="also run mhsa through the masked path")
    p.add_argument("--bool-mask", action="store_true", help="pass the boolean mask (converted inside every call)")
    p.add_argument("--max-math-gb", type=float, default=16.0,
                   help="largest (B,H,T,T) score memory the math fallback may use")
    args = p.parse_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out_file = open(args.json, "w") if args.json else None
    if not torch.cuda.is_available():
        print("attention_baseline: no CUDA device here; nothing to measure")
        return 0
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    impls = [x for x in args.impls.split(",") if x]
    patterns = [x for x in args.patterns.split(",") if x]
    H = args.heads
    for pat in patterns:
        pattern_windows(pat, H)  # reject bad names before any work
    flex = None
    if "torch-flex" in impls:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention)

    batch = f"B = {args.batch}" if args.batch > 0 else f"B = round({args.rows} rows / (H*T))"
    print(f"device: {name}, torch {torch.__version__}, bf16, H = {H}, {batch}, median of reps")
    print("FLOPs: allowed pairs only; fwd = 4*D per pair, fwd+bwd = 3.5 x fwd")
    print(f"{'impl':<13} {'D':>4} {'T':>6} {'B':>5} {'pattern':<10} {'backend':<10} | {'fwd ms':>9} {'TF/s':>8} | "
          f"{'f+b ms':>9} {'TF/s':>8} | {'f+b us/seq':>11}")
    torch.manual_seed(0)

    def emit(rec):
        if out_file:
            out_file.write(json.dumps(rec) + "\n")
            out_file.flush()

    for D in [int(x) for x in args.dims.split(",") if x]:
        for T in [int(x) for x in args.seqs.split(",") if x]:
            B = args.batch if args.batch > 0 else max(1, round(args.rows / (H * T)))
            shape = (B, H, T, D)
            q = torch.randn(shape, device=dev, dtype=torch.bfloat16)
            k = torch.randn(shape, device=dev, dtype=torch.bfloat16)
            v = torch.randn(shape, device=dev, dtype=torch.bfloat16)
            dout = torch.randn(shape, device=dev, dtype=torch.bfloat16)
            for impl in impls:
                for pat in patterns:
                    windows = pattern_windows(pat, H)
                    if impl == "torch-flash" and pat != "mhsa":
                        continue  # no per-head window in the flash backend
                    if impl == "torch-masked" and pat == "mhsa" and not args.masked_mhsa:
                        continue
                    flops = forward_flops(B, T, D, windows)
                    base = {"bench": "attention", "impl": impl, "device": name, "dtype": "bf16", "pattern": pat,
                            "windows": windows, "B": B, "H": H, "T": T, "D": D}
                    backends = []
                    if impl == "torch-flash":
                        backends = [("flash", [SDPBackend.FLASH_ATTENTION], None)]
                        attn = lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, is_causal=True)
                    elif impl == "torch-masked":
                        mask = window_mask(torch, T, windows, dev)
                        if not args.bool_mask:
                            bias = torch.zeros(mask.shape, device=dev, dtype=torch.bfloat16)
                            bias.masked_fill_(~mask, float("-inf"))
                            del mask
                            mask = bias
                        backends = [("efficient", [SDPBackend.EFFICIENT_ATTENTION], mask)]
                        math_gb = 3 * B * H * T * T * 2 / 2**30  # scores, probabilities, their grads (bf16)
                        if math_gb <= args.max_math_gb:
                            backends.append(("math", [SDPBackend.MATH], mask))
                        attn = lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m)
                    elif impl == "torch-flex":
                        win = torch.tensor(windows, device=dev, dtype=torch.int64)

                        def mask_mod(b, h, q_idx, kv_idx):
                            w = win[h]
                            return (kv_idx <= q_idx) & ((w == 0) | (q_idx - kv_idx < w))

                        block_mask = create_block_mask(mask_mod, B=None, H=H, Q_LEN=T, KV_LEN=T, device=dev)
                        backends = [("flex", None, block_mask)]
                        attn = lambda a, b, c, m: flex(a, b, c, block_mask=m)
                    else:
                        raise SystemExit(f"unknown impl {impl!r}")

                    used, err, status = None, "", "ok"
                    for backend_name, backend_list, m in backends:
                        results = {}  # both passes from one backend, never mixed
                        def run_fwd():
                            with torch.no_grad():
                                if backend_list is None:
                                    attn(q, k, v, m)
                                else:
                                    with sdpa_kernel(backend_list):
                                        attn(q, k, v, m)

                        def run_fwd_bwd():
                            for t in (q, k, v):
                                t.grad = None
                            if backend_list is None:
                                out = attn(q, k, v, m)
                            else:
                                with sdpa_kernel(backend_list):
                                    out = attn(q, k, v, m)
                            out.backward(dout)

                        try:
                            results["fwd"] = time_calls(torch, run_fwd, args)
                            for t in (q, k, v):
                                t.requires_grad_(True)
                            results["fwd_bwd"] = time_calls(torch, run_fwd_bwd, args)
                            used, status, err = backend_name, "ok", ""
                            break
                        except torch.cuda.OutOfMemoryError as e:
                            status, err = "oom", f"{backend_name}: {str(e).splitlines()[0]}"
                        except RuntimeError as e:  # the backend refused these inputs
                            status, err = "error", f"{backend_name}: {str(e).splitlines()[0]}"
                        finally:
                            for t in (q, k, v):
                                t.grad = None
                                t.requires_grad_(False)
                            torch.cuda.empty_cache()
                    if status != "ok" and len(backends) > 0 and backends[-1][0] == "efficient":
                        err += " (math fallback not tried: its scores would exceed --max-math-gb)"
                    if status == "ok":
                        tf, tb = results["fwd"], results["fwd_bwd"]
                        for pass_name, t, f in (("fwd", tf, flops), ("fwd_bwd", tb, 3.5 * flops)):
                            emit({**base, "backend": used, "status": "ok", "pass": pass_name, **t, "flops": f,
                                  "tflops": f / t["ms"] * 1e-9, "us_per_seq": t["ms"] * 1e3 / (B * H)})
                        print(f"{impl:<13} {D:>4} {T:>6} {B:>5} {pat:<10} {used:<10} | {tf['ms']:>9.3f} "
                              f"{flops / tf['ms'] * 1e-9:>8.1f} | {tb['ms']:>9.3f} {3.5 * flops / tb['ms'] * 1e-9:>8.1f}"
                              f" | {tb['ms'] * 1e3 / (B * H):>11.2f}", flush=True)
                    else:
                        for pass_name in ("fwd", "fwd_bwd"):
                            emit({**base, "backend": None, "status": status, "error": err, "pass": pass_name})
                        print(f"{impl:<13} {D:>4} {T:>6} {B:>5} {pat:<10} {status}: {err}", flush=True)
                    backends = mask = bias = block_mask = m = None  # free the mask before the next config
                    torch.cuda.empty_cache()
            q = k = v = dout = None  # free before the next (D, T)
            torch.cuda.empty_cache()
    if out_file:
        out_file.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
