#!/usr/bin/env python3
"""The GPU benchmark summary (apps/bench/gpu_summary.py) on records written here, without a GPU:
each target's PASS / FAIL from both sides' numbers, a side that did not run as "-", and a run cut
short (a missing file, a line that is not JSON) still summarised. Run: python3
apps/bench/test_gpu_summary.py"""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_summary  # noqa: E402


def attention(impl, pattern, D, T, ps, ms, **extra):
    return dict(impl=impl, pattern=pattern, D=D, T=T, B=8, H=6, device="H100", status="ok", ms=ms, tflops=100.0,
                us_per_seq=ms * 10, **{"pass": ps}, **extra)


def summary(files):
    with tempfile.TemporaryDirectory() as out:
        for name, rows in files.items():
            with open(os.path.join(out, name), "w") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in rows)
                fh.write("{cut short\n")
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            gpu_summary.main(out)
        return text.getvalue()


def row(text, start):
    return next(line for line in text.splitlines() if line.startswith(start))


class Summary(unittest.TestCase):
    def test_targets_from_both_sides(self):
        text = summary({"attention_keel.jsonl": [attention("keel", "mhsa", 64, 2048, "fwd_bwd", 2.0),
                                                 attention("keel", "ls_w50", 64, 2048, "fwd_bwd", 0.5)],
                        "attention_torch.jsonl": [attention("torch-flash", "mhsa", 64, 2048, "fwd_bwd", 1.5)]})
        self.assertIn("keel vs PyTorch on H100", text)
        causal = row(text, "| 64 | 2048 | - | - | - | 2.000")
        self.assertTrue(causal.endswith("| 0.75 | FAIL |"), causal)  # flash 1.5 ms / keel 2.0 ms < 0.8
        ls = row(text, "| 64 | 2048 | 2.000 | 0.500")
        self.assertIn("| 3.00 | - |", ls)  # speedup 1.5 / 0.5; no w100 run
        self.assertTrue(ls.endswith("| PASS |"), ls)

    def test_training_and_missing_files(self):
        text = summary({"train_keel.jsonl": [dict(impl="keel", preset="paper", attention=a, B=8, T=2048, status="ok",
                                                  step_ms=1.0, tokens_per_s=t) for a, t in (("mhsa", 900.0),
                                                                                           ("ls", 1000.0))]})
        self.assertIn("## Causal attention", text)  # no attention files: empty tables, no error
        self.assertNotIn("FlashAttention-2 comparison", text)
        self.assertIn("paper keel LS 1000 tok/s vs MHSA 900 tok/s (target: LS faster): PASS", text)


if __name__ == "__main__":
    unittest.main()
