#!/usr/bin/env python3
"""The agreement rule of apps/bench/bench_sample.py (sample_check.py), without torch: a token
mismatch is accepted only in bf16/f16 and only where the f32 reference's margin is below the
measured error; f32 must match exactly. Run: python3 apps/bench/test_sample_check.py"""

import math
import os
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sample_check  # noqa: E402

V = 6


def keel_side(rows, k=3):
    """keel's record from its logit rows: greedy tokens, top-k ids and logits (ties: smaller id)."""
    tokens, ids, vals = [], [], []
    for r in rows:
        order = sorted(range(len(r)), key=lambda i: (-r[i], i))[:k]
        tokens.append(order[0])
        ids.append(order)
        vals.append([r[i] for i in order])
    return tokens, ids, vals


def shifted(rows, d):
    return [[v + d for v in r] for r in rows]


REF = [[1.00, 0.50, 0.20, 0.10, 0.00, -0.3],
       [0.30, 0.90, 0.40, 0.10, 0.00, -0.3],
       [0.20, 0.10, 0.80, 0.79, 0.00, -0.3]]  # step 2: a near-tie, margin 0.01


class F32(unittest.TestCase):
    def test_identical_logits_pass(self):
        r = sample_check.check("f32", *keel_side(REF), REF, REF)
        self.assertTrue(r["passed"], r["failures"])
        self.assertIsNone(r["first_divergent_step"])

    def test_rounding_sized_differences_pass(self):
        r = sample_check.check("f32", *keel_side(shifted(REF, 3e-6)), shifted(REF, -2e-6), REF)
        self.assertTrue(r["passed"], r["failures"])
        self.assertAlmostEqual(r["err_keel_anchor"], 5e-6, places=9)

    def test_a_logit_off_by_1e_3_fails_with_equal_tokens(self):
        anchor = [row[:] for row in REF]
        anchor[1][2] += 1e-3
        r = sample_check.check("f32", *keel_side(REF), anchor, REF)
        self.assertFalse(r["passed"])
        self.assertTrue(all(st["agree"] for st in r["steps"]))

    def test_a_near_tie_flip_fails_in_f32(self):
        anchor = [row[:] for row in REF]
        anchor[2][3] = 0.81  # the anchor picks 3 where keel (and the reference) pick 2
        r = sample_check.check("f32", *keel_side(REF), anchor, REF, f32_tol=1.0)  # logits "close" on purpose
        self.assertFalse(r["passed"])
        self.assertEqual(r["first_divergent_step"], 2)

    def test_an_anchor_that_lost_its_cache_fails(self):
        anchor = [REF[0]] * 3  # every step the same row: no context
        r = sample_check.check("f32", *keel_side(REF), anchor, REF)
        self.assertFalse(r["passed"])


class Half(unittest.TestCase):
    def test_a_flip_below_the_margin_threshold_is_accepted(self):
        keel = shifted(REF, 0.004)
        keel[2][3] = 0.79 + 0.02  # keel flips to 3: 0.81 > 0.804; its error at 3 is 0.02
        anchor = shifted(REF, -0.004)
        r = sample_check.check("bf16", *keel_side(keel), anchor, REF)
        self.assertTrue(r["passed"], r["failures"])
        self.assertEqual(r["first_divergent_step"], 2)
        self.assertEqual(r["flips_accepted"], 1)
        self.assertAlmostEqual(r["err_keel"], 0.02, places=9)  # the flip's own step
        self.assertAlmostEqual(r["tau"], 4 * 0.004, places=9)  # 4 x the median error, not the flip's
        self.assertLess(r["steps"][2]["pair_margin"], r["tau"])

    def test_a_flip_above_the_margin_threshold_fails(self):
        keel = shifted(REF, 0.004)
        keel[0][1] = 1.01  # step 0: keel picks 1, whose reference margin is 0.5
        anchor = shifted(REF, -0.004)
        r = sample_check.check("bf16", *keel_side(keel), anchor, REF, max_ulps=1e9)
        self.assertFalse(r["passed"])
        self.assertEqual([st["step"] for st in r["steps"] if not st["accepted"]], [0])
        self.assertGreaterEqual(r["steps"][0]["pair_margin"], r["tau"])

    def test_tau_is_the_factor_times_the_median_error(self):
        # errors of 0.0025 at every step -> tau = factor x 0.0025; step 2's reference margin is 0.01
        keel = shifted(REF, 0.0025)
        keel[2][3] = keel[2][2] + 1e-6  # keel flips to 3 (its error there is 0.0125, one step of three)
        anchor = shifted(REF, -0.0025)
        for factor, passes in ((3.9, False), (4.1, True)):
            r = sample_check.check("bf16", *keel_side(keel), anchor, REF, tau_factor=factor)
            self.assertEqual(r["steps"][2]["keel"], 3)
            self.assertAlmostEqual(r["steps"][2]["pair_margin"], 0.01, places=9)
            self.assertAlmostEqual(r["err_typical"], 0.0025, places=9)
            self.assertEqual(r["passed"], passes, (factor, r["failures"]))

    def test_one_step_with_a_large_error_cannot_excuse_its_own_flip(self):
        keel = shifted(REF, 0.001)
        keel[0][1] = 1.1  # keel picks 1 at step 0, 0.6 above the reference: 0.5 below its best
        r = sample_check.check("bf16", *keel_side(keel), shifted(REF, -0.001), REF, max_ulps=1e9)
        self.assertFalse(r["passed"])
        self.assertLess(r["tau"], 0.01)

    def test_errors_larger_than_rounding_fail_even_when_tokens_agree(self):
        r = sample_check.check("bf16", *keel_side(shifted(REF, 0.5)), REF, REF)
        self.assertTrue(all(st["agree"] for st in r["steps"]))
        self.assertFalse(r["passed"])  # 0.5 is 64 bf16 ulps at 1.0

    def test_f16_ulps_are_finer(self):
        self.assertEqual(sample_check.ulp(1.0, "bf16"), 2 ** -7)
        self.assertEqual(sample_check.ulp(1.5, "f16"), 2 ** -10)
        self.assertEqual(sample_check.ulp(20.0, "bf16"), 2 ** -3)
        self.assertEqual(sample_check.ulp(0.01, "bf16"), 2 ** -7)


class Inputs(unittest.TestCase):
    def test_an_inconsistent_keel_record_fails(self):
        tokens, ids, vals = keel_side(REF)
        tokens[1] = 4
        r = sample_check.check("f32", tokens, ids, vals, REF, REF)
        self.assertFalse(r["passed"])

    def test_nan_is_never_within_tolerance(self):
        tokens, ids, vals = keel_side(REF)
        vals[0][1] = None  # keel's JSON writes NaN as null
        r = sample_check.check("f32", tokens, ids, vals, REF, REF)
        self.assertFalse(r["passed"])
        self.assertTrue(math.isnan(r["err_keel"]))

    def test_argmax_takes_the_first_maximum(self):
        self.assertEqual(sample_check.argmax([0.0, 2.0, 2.0, 1.0]), 1)

    def test_unequal_lengths_are_refused(self):
        with self.assertRaises(ValueError):
            sample_check.check("f32", *keel_side(REF), REF[:2], REF)


if __name__ == "__main__":
    unittest.main()
