#!/usr/bin/env python3
"""The keel-vs-PyTorch summary of a GPU benchmark run (apps/bench/run_gpu_benchmarks.sh, which
prints it last and keeps it as $OUT/summary.md), from the JSON lines the run left in OUT:

    python3 apps/bench/gpu_summary.py OUT

One markdown table per comparison, each with its target and PASS / FAIL where the run measured
both sides: the FlashAttention-2 comparison (and, when measured, the deterministic dQ order's
cost and Hopper's forward), causal attention against PyTorch's flash, the LS-attention layer
against flash MHSA, local heads' growth in T, and training throughput. A file that is missing
or a line that is not JSON is skipped: a run cut short still gets the tables it measured.
docs/gpu-benchmarks.md says what each number means."""
import json
import os
import sys


def load(out, name):
    """The records of one JSON-lines file of the run; none where it is missing."""
    rows, path = [], os.path.join(out, name)
    if os.path.exists(path):
        for line in open(path):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


def f(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def by_key(rows):
    """(impl, pattern, D, T, pass) -> record, of the records that ran."""
    return {(r["impl"], r["pattern"], r["D"], r["T"], r["pass"]): r for r in rows if r.get("status") == "ok"}


def fa2_table(F):
    r0 = next(iter(F.values()))
    print(f"## FlashAttention-2 comparison: bf16, B = {r0['B']}, H = {r0['H']}; ms (median)\n")
    print("Targets: MHSA keel at least PyTorch SDPA flash's speed (ratio = flash ms / keel ms >= 1.0, fwd+bwd); "
          "LS (w 50) keel >= 3x PyTorch with the window mask (masked SDPA), fwd+bwd.\n")
    print("| D | T | pattern | keel fwd | torch fwd | keel f+b | torch f+b | torch / keel (f+b) | keel f+b TF/s | target |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for D in sorted({k[2] for k in F}):
        for T in sorted({k[3] for k in F}):
            for pat in ("mhsa", "ls_w50"):
                torch_impl = "torch-flash" if pat == "mhsa" else "torch-masked"
                g = lambda impl, ps: (F.get((impl, pat, D, T, ps)) or {}).get("ms")
                km, tt = g("keel", "fwd_bwd"), g(torch_impl, "fwd_bwd")
                if km is None and tt is None:
                    continue
                ratio = tt / km if tt and km else None
                goal = 1.0 if pat == "mhsa" else 3.0
                target = "-" if ratio is None else ("PASS" if ratio >= goal else "FAIL") + f" (>= {goal:.1f})"
                rk = F.get(("keel", pat, D, T, "fwd_bwd"))
                print(f"| {D} | {T} | {pat} ({torch_impl}) | {f(g('keel', 'fwd'), '.3f')} | "
                      f"{f(g(torch_impl, 'fwd'), '.3f')} | {f(km, '.3f')} | {f(tt, '.3f')} | {f(ratio)} | "
                      f"{f(rk and rk['tflops'], '.0f')} | {target} |")
    print()


def order_table(F):
    print("What the deterministic dQ order costs (MHSA fwd+bwd ms; any order = keel::set_deterministic(false)):\n")
    print("| D | T | keel, ordered (default) | keel, any order | ordered / any order | torch flash |")
    print("|---|---|---|---|---|---|")
    for D in sorted({k[2] for k in F}):
        for T in sorted({k[3] for k in F}):
            g = lambda impl: (F.get((impl, "mhsa", D, T, "fwd_bwd")) or {}).get("ms")
            o, a = g("keel"), g("keel-nondet")
            if o is None and a is None:
                continue
            print(f"| {D} | {T} | {f(o, '.3f')} | {f(a, '.3f')} | {f(o / a if o and a else None)} | "
                  f"{f(g('torch-flash'), '.3f')} |")
    print()


def hopper_table(F):
    print("Hopper's forward (--kernel sm90) against the mma forward and PyTorch's flash (fwd TF/s; "
          "targets at T >= 4096: D 128 MHSA >= 550, LS (w 50) f+b >= 3x flash MHSA at T 2048):\n")
    print("| D | T | pattern | keel mma fwd TF/s | keel sm90 fwd TF/s | torch fwd TF/s | sm90 / mma | sm90 f+b ms |")
    print("|---|---|---|---|---|---|---|---|")
    for D in sorted({k[2] for k in F}):
        for T in sorted({k[3] for k in F}):
            for pat in ("mhsa", "ls_w50"):
                r = lambda impl, ps="fwd": F.get((impl, pat, D, T, ps)) or {}
                torch_impl = "torch-flash" if pat == "mhsa" else "torch-masked"
                a, b = r("keel").get("tflops"), r("keel-sm90").get("tflops")
                if b is None:
                    continue
                print(f"| {D} | {T} | {pat} | {f(a, '.0f')} | {f(b, '.0f')} | {f(r(torch_impl).get('tflops'), '.0f')} | "
                      f"{f(b / a if a and b else None)} | {f(r('keel-sm90', 'fwd_bwd').get('ms'), '.3f')} |")
    print()


def causal_table(A, ms, Ds, Ts):
    print("## Causal attention (MHSA), bf16, H=6, ~2M query rows; ratio = keel speed / PyTorch flash speed\n")
    print("Target: fwd+bwd ratio >= 0.8 for D = 64, 128 at T >= 2048.\n")
    print("| D | T | keel fwd ms | flash fwd ms | fwd ratio | keel f+b ms | keel f+b TF/s | flash f+b ms | flash f+b TF/s | f+b ratio | target |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for D in Ds:
        for T in Ts:
            kf, tf = ms("keel", "mhsa", D, T, "fwd"), ms("torch-flash", "mhsa", D, T, "fwd")
            kb, tb = ms("keel", "mhsa", D, T), ms("torch-flash", "mhsa", D, T)
            if kb is None and tb is None:
                continue
            rk, rt = A.get(("keel", "mhsa", D, T, "fwd_bwd")), A.get(("torch-flash", "mhsa", D, T, "fwd_bwd"))
            ratio = tb / kb if kb and tb else None
            target = "-" if D not in (64, 128) or T < 2048 or ratio is None else ("PASS" if ratio >= 0.8 else "FAIL")
            print(f"| {D} | {T} | {f(kf, '.3f')} | {f(tf, '.3f')} | {f(tf / kf if kf and tf else None)} | "
                  f"{f(kb, '.3f')} | {f(rk and rk['tflops'], '.0f')} | {f(tb, '.3f')} | "
                  f"{f(rt and rt['tflops'], '.0f')} | {f(ratio)} | {target} |")


def ls_tables(A, ms, Ds, Ts):
    print("\n## LS-attention layer (5 local heads w + 1 global), fwd+bwd ms; speedup = PyTorch flash MHSA (same heads) / keel LS\n")
    print("Target: speedup >= 2.5 for ls_w50 at T = 2048.\n")
    print("| D | T | keel mhsa | keel ls_w50 | keel ls_w100 | torch flash mhsa | torch masked ls_w50 | speedup ls_w50 | speedup ls_w100 | keel ls_w50 vs torch masked | target |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for D in Ds:
        for T in Ts:
            km, k50, k100 = ms("keel", "mhsa", D, T), ms("keel", "ls_w50", D, T), ms("keel", "ls_w100", D, T)
            tm, t50 = ms("torch-flash", "mhsa", D, T), ms("torch-masked", "ls_w50", D, T)
            if k50 is None and t50 is None:
                continue
            s50 = tm / k50 if tm and k50 else None
            s100 = tm / k100 if tm and k100 else None
            target = "-" if T != 2048 or s50 is None else ("PASS" if s50 >= 2.5 else "FAIL")
            print(f"| {D} | {T} | {f(km, '.3f')} | {f(k50, '.3f')} | {f(k100, '.3f')} | {f(tm, '.3f')} | "
                  f"{f(t50, '.3f')} | {f(s50)} | {f(s100)} | {f(t50 / k50 if t50 and k50 else None)} | {target} |")
    print("\n## Local heads only (local_w50): linear in T. B*H*T is fixed, so linear = flat ms across T;\n"
          "growth = (time per sequence / T) relative to T = 1024 (1.00 = perfectly linear; target <= 1.25)\n")
    print("| D | T | keel f+b ms | keel us/seq | growth | torch masked f+b ms | target |")
    print("|---|---|---|---|---|---|---|")
    for D in Ds:
        base = A.get(("keel", "local_w50", D, min(Ts), "fwd_bwd")) if Ts else None
        for T in Ts:
            r = A.get(("keel", "local_w50", D, T, "fwd_bwd"))
            if r is None:
                continue
            g = (r["us_per_seq"] / T) / (base["us_per_seq"] / base["T"]) if base else None
            print(f"| {D} | {T} | {r['ms']:.3f} | {r['us_per_seq']:.2f} | {f(g)} | "
                  f"{f(ms('torch-masked', 'local_w50', D, T), '.3f')} | "
                  f"{'-' if g is None else ('PASS' if g <= 1.25 else 'FAIL')} |")


def training_table(train):
    print("\n## Training throughput (random-ish data; tokens/s = median over timed steps; MFU with keel's FLOP count)\n")
    print("Targets: gpt2-124m keel MFU >= 40% (H100); paper LS step faster than paper MHSA (keel).\n")
    print("| model | attention | B x T | impl | status | ms/step | tokens/s | MFU | peak mem GiB | keel speed / this |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    keel_tps = {(r["preset"], r["attention"]): r.get("tokens_per_s")
                for r in train if r["impl"] == "keel" and r.get("status") == "ok"}
    for r in train:
        ok = r.get("status") == "ok"
        k = keel_tps.get((r["preset"], r["attention"]))
        rel = "1.00" if r["impl"] == "keel" and ok else (
            f"{k / r['tokens_per_s']:.2f}x" if ok and k and r.get("tokens_per_s") else "-")
        mfu, mem = r.get("mfu"), r.get("mem_bytes")
        print(f"| {r['preset']} | {r['attention']} | {r['B']} x {r['T']} | {r['impl']} | {r.get('status')}"
              f"{'' if ok else ': ' + str(r.get('error', ''))[:80]} | {f(r.get('step_ms'), '.1f')} | "
              f"{f(r.get('tokens_per_s'), '.0f')} | {'-' if mfu is None else f'{100 * mfu:.1f}%'} | "
              f"{'-' if not mem or mem < 0 else f'{mem / 2**30:.1f}'} | {rel} |")
    g = [r for r in train if r["impl"] == "keel" and r["preset"] == "gpt2-124m" and r.get("status") == "ok"]
    if g and g[0].get("mfu") is not None:
        print(f"\ngpt2-124m keel MFU {100 * g[0]['mfu']:.1f}% (target 40%): {'PASS' if g[0]['mfu'] >= 0.40 else 'FAIL'}")
    pm, pl = keel_tps.get(("paper", "mhsa")), keel_tps.get(("paper", "ls"))
    if pm and pl:
        print(f"paper keel LS {pl:.0f} tok/s vs MHSA {pm:.0f} tok/s (target: LS faster): {'PASS' if pl > pm else 'FAIL'}")


def main(out):
    F = by_key(load(out, "attention_fa2_keel.jsonl") + load(out, "attention_fa2_torch.jsonl"))
    A = by_key(load(out, "attention_keel.jsonl") + load(out, "attention_torch.jsonl"))
    first = next(iter(A.values()), None) or next(iter(F.values()), None)
    print(f"# keel vs PyTorch on {first['device'] if first else '?'}\n")
    if F:
        fa2_table(F)
        if any(k[0] == "keel-nondet" for k in F):
            order_table(F)
        if any(k[0] == "keel-sm90" for k in F):
            hopper_table(F)
    ms = lambda impl, pat, D, T, ps="fwd_bwd": (A.get((impl, pat, D, T, ps)) or {}).get("ms")
    Ds, Ts = sorted({k[2] for k in A}), sorted({k[3] for k in A})
    causal_table(A, ms, Ds, Ts)
    ls_tables(A, ms, Ds, Ts)
    training_table(load(out, "train_keel.jsonl") + load(out, "train_torch.jsonl"))


if __name__ == "__main__":
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: python3 apps/bench/gpu_summary.py OUT (the folder of a run_gpu_benchmarks.sh run)")
    main(sys.argv[1])
