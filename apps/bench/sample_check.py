"""The agreement check of apps/bench/bench_sample.py: does an anchor compute keel's model?

Pure Python (no torch), so that the rule is unit-tested where torch is not installed
(apps/bench/test_sample_check.py). The inputs, for one prompt and n greedy steps:

  keel_tokens        keel's greedy tokens after the prompt (its record's "greedy")
  keel_top_ids       per step, the ids of keel's 8 largest logits, largest first ("greedy_top_ids")
  keel_top_logits    per step, those logits ("greedy_top_logits")
  anchor_rows        per step, the anchor's full logit row (V floats), the anchor *teacher-forced*
                     on keel's tokens: step s is fed the prompt and keel_tokens[:s]
  ref_rows           per step, the f32 reference's full logit row, fed the same: the same weights
                     (rounded to the run's dtype) evaluated in f32 in one forward pass, no cache

Both implementations see the same inputs at every step, so every step is a comparison of its
own; a free-running greedy continuation of the anchor equals keel's exactly when the anchor's
teacher-forced argmax equals keel's token at every step.

The rule:
  f32   the bug test. The anchor's argmax must equal keel's token at every step, and the logits
        must agree: keel's top logits against the anchor's at the same ids, and the anchor's
        cached steps against the one-pass reference, each within f32_tol x max(1, |top logit|)
        (default 1e-5).
  bf16, f16
        e_keel(s)   = max |keel - ref| over keel's top ids at step s
        e_anchor(s) = max |anchor - ref| over the whole row at step s
        Every one must be rounding-sized: at most max_ulps (8) units in the last place of the
        run's dtype at the largest |top logit| of the reference, else the check fails whatever
        the tokens. The measured error is the typical one, the median over the steps of each
        side's e(s), the larger side's. Where keel's token x and the anchor's argmax y differ,
        the step is accepted only if both are near-ties of the reference:
            ref_max - min(ref[x], ref[y]) < tau,   tau = tau_factor (4) x the measured error
        (when x and y are the reference's top two, the left side is its top-2 margin). A side
        within e of the reference can pick a token at most 2e below the reference's best; the
        factor 4 leaves 2x room for steps noisier than the median, and the median keeps a step
        whose error is out of line from raising tau to excuse its own flip (the maximum would
        excuse every flip: a flip is itself an error of half its margin).
"""

import math
import statistics

TOLERANCES = {"f32_tol": 1e-5, "max_ulps": 8.0, "tau_factor": 4.0}
MANTISSA_BITS = {"f32": 23, "bf16": 7, "f16": 10}


def ulp(x, dtype):
    """The spacing of `dtype` numbers at |x| (normal range; at least the spacing at 1)."""
    x = abs(x)
    e = math.floor(math.log2(x)) if x >= 1 else 0
    return 2.0 ** (e - MANTISSA_BITS[dtype])


def argmax(row):
    """The first largest entry's index (ties to the smallest id, as keel and torch.argmax)."""
    best = 0
    for i, v in enumerate(row):
        if v > row[best] or (math.isnan(v) and not math.isnan(row[best])):
            best = i
    return best


def worse(d, e):
    """The larger of two errors, NaN winning."""
    return e if math.isnan(e) or (not math.isnan(d) and e > d) else d


def median(xs):
    return math.nan if any(math.isnan(x) for x in xs) else statistics.median(xs)


def largest(xs):
    d = 0.0
    for x in xs:
        d = worse(d, x)
    return d


def max_abs_diff(a, b):
    return largest(abs(x - y) for x, y in zip(a, b))


def check(dtype, keel_tokens, keel_top_ids, keel_top_logits, anchor_rows, ref_rows, f32_tol=None, max_ulps=None,
          tau_factor=None):
    """Returns a dict: passed (bool), failures (list of str), steps (per step: keel, anchor, ref
    argmax, ref top-2 margin, the pair's margin where they differ, agree, accepted), the errors
    (err_keel, err_anchor: largest over the steps; err_keel_anchor: keel against the anchor at
    keel's top ids; err_typical: the measured error tau is made of), tolerance (f32: the logit
    tolerance; bf16/f16: the ceiling on the errors), tau, first_divergent_step (None when every
    step agrees) and flips_accepted."""
    f32_tol = TOLERANCES["f32_tol"] if f32_tol is None else f32_tol
    max_ulps = TOLERANCES["max_ulps"] if max_ulps is None else max_ulps
    tau_factor = TOLERANCES["tau_factor"] if tau_factor is None else tau_factor
    if dtype not in MANTISSA_BITS:
        raise ValueError(f"unknown dtype {dtype!r}")
    n = len(keel_tokens)
    if not (len(keel_top_ids) == len(keel_top_logits) == len(anchor_rows) == len(ref_rows) == n) or n == 0:
        raise ValueError(f"the check needs one entry per step: {n} tokens, {len(keel_top_ids)} top-id lists, "
                         f"{len(keel_top_logits)} top-logit lists, {len(anchor_rows)} anchor rows, "
                         f"{len(ref_rows)} reference rows")
    # keel's JSON writes a NaN logit as null
    keel_top_logits = [[math.nan if v is None else v for v in row] for row in keel_top_logits]
    failures = []
    for s in range(n):
        if not keel_top_ids[s] or keel_top_ids[s][0] != keel_tokens[s]:
            failures.append(f"step {s}: keel's record is inconsistent: its largest logit is at "
                            f"{keel_top_ids[s][:1]}, its greedy token is {keel_tokens[s]}")
    e_keel, e_anchor, err_keel_anchor = [], [], 0.0
    for s in range(n):
        e = 0.0
        for i, v in zip(keel_top_ids[s], keel_top_logits[s]):
            e = worse(e, abs(v - ref_rows[s][i]))
            err_keel_anchor = worse(err_keel_anchor, abs(v - anchor_rows[s][i]))
        e_keel.append(e)
        e_anchor.append(max_abs_diff(anchor_rows[s], ref_rows[s]))
    err_keel, err_anchor = largest(e_keel), largest(e_anchor)
    typical = max(median(e_keel), median(e_anchor))
    scale = max(abs(r[argmax(r)]) for r in ref_rows)

    steps, first = [], None
    if dtype == "f32":
        tol = f32_tol * max(1.0, scale)
        tau = 0.0
        for name, e in (("keel against the anchor", err_keel_anchor),
                        ("the anchor's cached steps against one pass", err_anchor),
                        ("keel against the one-pass reference", err_keel)):
            if not e <= tol:
                failures.append(f"f32 logits differ: {name}: max|dlogit| {e:.3g} > {tol:.3g}")
    else:
        tol = max_ulps * ulp(scale, dtype)
        tau = tau_factor * typical
        for name, e in (("keel", err_keel), ("the anchor", err_anchor)):
            if not e <= tol:
                failures.append(f"{name}'s {dtype} logits are further from the f32 reference than rounding explains: "
                                f"max|dlogit| {e:.3g} > {max_ulps:g} ulp = {tol:.3g}")
    for s in range(n):
        ref = ref_rows[s]
        x, y, r = keel_tokens[s], argmax(anchor_rows[s]), argmax(ref)
        top = ref[r]
        second = max((v for i, v in enumerate(ref) if i != r), default=top)
        step = {"step": s, "keel": x, "anchor": y, "ref": r, "ref_margin": top - second, "agree": x == y,
                "accepted": x == y}
        if x != y:
            step["pair_margin"] = top - min(ref[x], ref[y])
            step["accepted"] = dtype != "f32" and step["pair_margin"] < tau
            if first is None:
                first = s
            if dtype == "f32":
                failures.append(f"step {s}: f32 tokens differ: keel {x}, anchor {y} (reference {r}, top-2 margin "
                                f"{step['ref_margin']:.3g})")
            elif not step["accepted"]:
                failures.append(f"step {s}: keel {x}, anchor {y}: the reference's margin {step['pair_margin']:.3g} "
                                f"is not below tau {tau:.3g}, so rounding does not explain the flip")
        steps.append(step)
    return {"passed": not failures, "failures": failures, "dtype": dtype, "steps": steps, "err_keel": err_keel,
            "err_anchor": err_anchor, "err_keel_anchor": err_keel_anchor,
            "err_typical": typical, "tolerance": tol, "tau": tau,
            "first_divergent_step": first, "flips_accepted": sum(1 for st in steps if not st["agree"] and st["accepted"])}


def summary(result):
    """One line for the table: pass/FAIL, how, and the numbers."""
    r = result
    if r["dtype"] == "f32":
        how = (f"max abs dlogit: keel-anchor {r['err_keel_anchor']:.2g}, keel-ref {r['err_keel']:.2g}, "
               f"anchor-ref {r['err_anchor']:.2g} (tol {r['tolerance']:.2g})")
    else:
        how = (f"max err keel {r['err_keel']:.2g}, anchor {r['err_anchor']:.2g} (ceiling {r['tolerance']:.2g}); "
               f"median {r['err_typical']:.2g}, tau {r['tau']:.2g}; "
               f"{r['flips_accepted']} near-tie flip(s) accepted")
        if r["first_divergent_step"] is not None:
            how += f", first at step {r['first_divergent_step']}"
    return ("pass: " if r["passed"] else "FAIL: ") + how
