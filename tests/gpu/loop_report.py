#!/usr/bin/env python3
"""The kernel report's main-loop measurement (tests/gpu/sass.py) applied to any cubin:

    python3 tests/gpu/loop_report.py CUBIN [--ptxas LOG] [--expect MEASURED_JSON]

For every kernel of the cubin with a loop of tensor-core instructions, the report's loop columns
(docs/gpu-benchmarks.md, "Static kernel report"): the path through its main loop that runs every
product and issues no cp.async copy (for kernels whose copies are TMA's, as Hopper's are; the
report itself follows the cp.async kernels' copies per tile), its instructions per
HMMA-equivalent, HMMA and integer shares, branches, barriers and tests. The main loop is an
innermost loop with the most HMMA-equivalents (so a persistent kernel's loop over its tiles,
which holds the whole key loop, is not taken for it), the cheapest of them where there are
several (a kernel that keeps its masked tiles in a loop of their own). With the ptxas -v log of the compile,
registers, spills and shared memory too. keel measures FlashAttention-3's Hopper kernels with
it, compiled from their public source (docs/gpu-benchmarks.md, "FlashAttention-3 in the same
report", has the commands). --expect checks that the kernels the report measured in
MEASURED_JSON (kernel_report.py's, of the same cubin) get the same loop here: CI runs it on keel's
Hopper forward, so the two tools cannot drift apart.
"""
import argparse, json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report as kr  # noqa: E402
import sass  # noqa: E402


def inner_loops(blocks):
    """The loops holding HMMA-equivalents but no other loop that holds some: the key loops (a
    kernel may have several, such as FlashAttention-3's masked and unmasked ones)."""
    loops = sass.natural_loops(blocks)
    hmma = {h: sum(sass.mma_weight(x) for k in b for x in blocks[k]["ins"]) for h, b in loops.items()}
    return [(h, loops[h]) for h, b in loops.items()
            if hmma[h] and not any(o != h and hmma[o] and loops[o] < b for o in loops)]


def main_loop_metrics(ins, source):
    """Of the inner loops with the most HMMA-equivalents, the one with the cheapest path (the
    unmasked loop where a kernel keeps a masked one apart): the report's loop columns."""
    best = None
    for loop in inner_loops(sass.basic_blocks(ins)):
        m = sass.loop_metrics(ins, source, 0, 1 << 30, pick=lambda blocks, loop=loop: loop)
        if best is None or (m["hmma"], -m["instr"]) > (best["hmma"], -best["instr"]):
            best = m
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cubin")
    p.add_argument("--ptxas", help="the ptxas -v output of the compile (registers, spills, shared memory)")
    p.add_argument("--expect", help="kernel_report.py's measured.json: its loops of these kernels must match")
    args = p.parse_args()
    nvdisasm = kr.find_tool("nvdisasm")
    if not nvdisasm:
        sys.exit("loop report: nvdisasm not found; `bash .ci/setup --test` installs it from PyPI")
    r = kr.run([nvdisasm, "-c", "-gi", args.cubin])
    if r.returncode != 0:
        sys.exit("loop report: nvdisasm could not read %s: %s" % (args.cubin, r.stderr.strip()))
    funcs = sass.parse_sass(r.stdout)
    ptxas = kr.parse_ptxas(open(args.ptxas).read()) if args.ptxas else {}
    names = sass.demangle(list(funcs))
    expected = json.load(open(args.expect))["kernels"] if args.expect else {}
    rows, legend, differ = [], [], []
    for i, mangled in enumerate(sorted(funcs)):
        loop = main_loop_metrics(funcs[mangled], args.cubin)
        if loop is None:
            continue
        want = expected.get(mangled, {}).get("loop")
        if want and (want["instr"], want["hmma"]) != (loop["instr"], loop["hmma"]):
            differ.append("%s: %d/%d here, %d/%d in the report" % (names[mangled], loop["instr"], loop["hmma"],
                                                                   want["instr"], want["hmma"]))
        d = ptxas.get(mangled, {})
        label = "k%d" % i
        legend.append("%s: %s" % (label, names[mangled]))
        rows.append([label, d.get("regs", "?"), d.get("spill_st", 0) + d.get("spill_ld", 0) if d else "?",
                     d.get("smem_static", "?"), "%d/%d" % (loop["instr"], loop["hmma"]), loop["ipm"],
                     loop["hmma_pct"], loop["int_pct"], loop["control"], loop["sync"], loop["tests"]])
    print(kr.table(rows, ["kernel", "regs", "spill B", "static smem B", "path instr/HMMA-equiv.", "instr/HMMA",
                          "HMMA %", "INT %", "control", "sync", "tests"]))
    print("\n".join(legend))
    if args.expect and not any(expected.get(m, {}).get("loop") for m in funcs):
        sys.exit("loop report: %s measured no loop of this cubin's kernels" % args.expect)
    if differ:
        sys.exit("loop report: FAIL: the loops differ from kernel_report.py's:\n" + "\n".join(differ))


if __name__ == "__main__":
    main()
