#!/usr/bin/env python3
"""keel's static kernel report: what the compiler says about every CUDA kernel, no GPU needed.

    python3 tests/gpu/kernel_report.py [--out DIR] [--budgets FILE] [--update] [--reuse] [--self-test]

Compiles every CUDA source (core/cuda, ops/cuda, optim/cuda) alone for sm_90 into a cubin with
`nvcc -O3 -lineinfo -cubin -Xptxas -v`, then reports, per kernel (instantiations that differ
only in a type argument grouped, worst one shown): registers, spill bytes, stack frame, shared
memory, block size and resident blocks (CTAs) per SM on an H100/H200 (Hopper's own kernels,
*_sm90_*.cu, for sm_90a). For the kernels whose budget-file facts give their cp.async copies per
tile (the tensor-core attention kernels; 0 for Hopper's, whose copies are the producer's TMA) it
also disassembles the SASS (nvdisasm) and measures the main loop: the cheapest path through it
that runs every HMMA and issues the next tile's copies, and the loop's whole code. An
HGMMA.64xNx16 counts as N / 8 HMMA (a warp's share, in m16n8k16 products: mma_weight). For
kernels with setmaxnreg, the registers of each warp role and the copy pipeline's stages; a
block whose roles ask for more registers than the SM has fails (a GPU would hang in setmaxnreg).
docs/gpu-benchmarks.md ("Static kernel report") explains every column. The budgets
(tests/gpu/kernel_budgets.json) are a ratchet: exit status 1 names each kernel that got worse
than its budget; --update rewrites them from today's values.
--self-test checks, on the last measurement, that a budget tightened below today's value fails,
and so does a measurement made worse.
Without nvcc the report says so and exits 0; nvdisasm comes from PyPI (bash .ci/setup --test).
"""
import argparse, concurrent.futures, glob, itertools, json, math, os, re, shutil, struct, subprocess, sys, tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Reading what nvcc made (kernel names, the SASS and its main loop, what an SM makes of it) is sass.py.
from sass import (ROOT, SHORT_TYPES, demangle, split_name, group_of, parse_sass, loop_metrics,  # noqa: E402
                  register_roles, occupancy, register_file)
SOURCE_DIRS = ("core/cuda", "ops/cuda", "optim/cuda")
NVCC_FLAGS = ["-std=c++20", "--expt-relaxed-constexpr", "-O3", "-DNDEBUG", "-DKEEL_WITH_CUDA=1", "-I" + ROOT,
              "-arch=sm_90", "-lineinfo", "-cubin", "-Xptxas", "-v"]
# Budgets: metric -> (larger is worse, tolerance added by --update). Ratios get a relative one.
METRICS = {"regs": (True, 4), "spill": (True, 0), "ctas": (False, 0), "ipm": (True, 0.03),
           "static_ipm": (True, 0.03), "int_pct": (True, 1.0), "control": (True, 0.05), "sync": (True, 0),
           "local": (True, 0), "tests": (True, 0.05), "mask_free": (False, 0)}


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def find_tool(name):
    dirs = [os.environ.get("KEEL_CUDA_TOOLS", ""), os.path.expanduser("~/.cache/keel/cuda-tools"), "/usr/local/cuda"]
    found = shutil.which(name)
    for d in dirs:
        if not found and d:
            found = next(iter(sorted(glob.glob(os.path.join(d, "nvidia/*/bin", name)) + glob.glob(
                os.path.join(d, "bin", name)))), None)
    return found


# ---------------------------------------------------------------- compile and ptxas -v

def facts_for_source(source, budgets):
    """The C++ expressions (shared memory, cp.async copies and scores per thread and tile) that the
    budget file asks nvcc to evaluate for the kernels of one source: [(kernel, fact, expression)].
    An entry's "each" lists values that {NAME} takes in its kernel and expressions."""
    out = []
    for f in budgets.get("facts", []):
        each = f.get("each", {})
        for combo in itertools.product(*each.values()):
            sub = dict(zip(each, combo))
            if f["source"] == source:
                out += [(f["kernel"].format(**sub), key, str(expr).format(**sub)) for key, expr in f.items()
                        if key not in ("kernel", "source", "each", "why")]
    return out


def arch_of(source):
    """Hopper's kernels (*_sm90_*.cu) use sm_90a's own instructions, as CMake builds them (ops/CMakeLists.txt)."""
    return "-arch=sm_90a" if "_sm90_" in os.path.basename(source) else "-arch=sm_90"


def compile_one(nvcc, source, out, facts):
    """One .cu -> cubin; facts become template arguments of empty kernels whose names ptxas prints."""
    stem = source.replace("/", "_")
    src = os.path.join(ROOT, source)
    if facts:
        src = os.path.join(out, stem + ".probe.cu")
        lines = ['#include "%s"' % os.path.join(ROOT, source), "namespace keel::cuda { namespace {",
                 "template <long long I, long long V> __global__ void keel_report_fact() {}"]
        for i, (_, _, expr) in enumerate(facts):
            lines.append("template __global__ void keel_report_fact<%d, (%s)>();" % (i, expr))
        open(src, "w").write("\n".join(lines + ["} }", ""]))
    cubin = os.path.join(out, stem + ".cubin")
    r = run([nvcc] + [arch_of(source) if f == "-arch=sm_90" else f for f in NVCC_FLAGS] + ["-o", cubin, src])
    if r.returncode != 0:
        sys.exit("kernel report: nvcc failed on %s:\n%s" % (source, r.stderr[-4000:]))
    return dict(source=source, cubin=cubin, log=r.stderr + r.stdout)


def parse_ptxas(log):
    kernels, cur = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for 'sm_90a?'", line)
        if m:
            cur = kernels.setdefault(m.group(1), dict(regs=0, spill_st=0, spill_ld=0, stack=0, smem_static=0))
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur.update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
            m = re.search(r"(\d+) bytes smem", line)
            cur["smem_static"] = int(m.group(1)) if m else 0
    return kernels


def launch_bounds(cubin):
    """__launch_bounds__ of each kernel: EIATTR_MAX_THREADS (0x05) in its .nv.info.<name> section."""
    data = open(cubin, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = sections[shstrndx][4]
    bounds = {}
    for name_at, _, _, _, offset, size in sections:
        name = data[strtab + name_at:data.index(b"\0", strtab + name_at)].decode()
        if not name.startswith(".nv.info."):
            continue
        pos = offset
        while pos < offset + size:
            fmt, attr = data[pos], data[pos + 1]
            length = struct.unpack_from("<H", data, pos + 2)[0] if fmt == 0x04 else 0
            if fmt == 0x04 and attr == 0x05:
                x, y, z = struct.unpack_from("<III", data, pos + 4)
                bounds[name[len(".nv.info."):]] = x * y * z
            pos += 4 + length
    return bounds


# ---------------------------------------------------------------- measure, check, print

def measure(args, budgets):
    nvcc = find_tool("nvcc")
    if not nvcc:
        print("kernel report: skipped: nvcc not found (on PATH or in /usr/local/cuda/bin), nothing checked")
        sys.exit(0)
    nvdisasm = find_tool("nvdisasm")
    if not nvdisasm:
        sys.exit("kernel report: nvdisasm not found (PATH, $KEEL_CUDA_TOOLS, ~/.cache/keel/cuda-tools, "
                 "/usr/local/cuda/bin); `bash .ci/setup --test` installs it from PyPI (nvidia-cuda-nvdisasm)")
    os.makedirs(args.out, exist_ok=True)
    sources = sorted(os.path.relpath(p, ROOT) for d in SOURCE_DIRS for p in glob.glob(os.path.join(ROOT, d, "*.cu")))
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        units = list(pool.map(lambda s: compile_one(nvcc, s, args.out, facts_for_source(s, budgets)), sources))
    kernels = {}
    for u in units:
        facts = facts_for_source(u["source"], budgets)
        ptxas, bounds = parse_ptxas(u["log"]), launch_bounds(u["cubin"])
        names = demangle(list(ptxas))
        values = {}
        for mangled, d in ptxas.items():
            name, targs = split_name(names[mangled])
            if name == "keel_report_fact":
                values[int(re.sub(r"\D", "", targs[0]))] = int(re.sub(r"[a-z]+$", "", targs[1]))
        sass = None
        for mangled, d in ptxas.items():
            name, targs = split_name(names[mangled])
            if name == "keel_report_fact":
                continue
            label = name + ("<%s>" % ", ".join(SHORT_TYPES.get(a, a) for a in targs) if targs else "")
            full = name + ("<%s>" % ", ".join(targs) if targs else "")
            fact = {key: values[i] for i, (kernel, key, _) in enumerate(facts) if kernel == full}
            threads = bounds.get(mangled) or budgets["threads"].get(name, budgets["threads"]["default"])
            smem = d["smem_static"] + fact.get("smem", 0)
            ctas, limit = occupancy(d["regs"], smem, threads)
            k = dict(d, source=u["source"], label=label, group=group_of(name, targs), threads=threads, smem=smem,
                     ctas=ctas, limit=limit, spill=d["spill_st"] + d["spill_ld"])
            if "copies" in fact:
                if sass is None:
                    r = run([nvdisasm, "-c", "-gi", u["cubin"]])
                    sass = parse_sass(r.stdout)
                try:
                    k["loop"] = loop_metrics(sass[mangled], u["source"], fact["copies"], fact["scores"])
                except ValueError as e:
                    sys.exit("kernel report: %s: %s (the copies fact in %s)" % (label, e, args.budgets))
                k["roles"] = register_roles(sass[mangled])
                k.update({key: fact[key] for key in ("stage", "stages") if key in fact})
            kernels[mangled] = k
    version = lambda tool: next((l.split(", ")[-1] for l in run([tool, "--version"]).stdout.splitlines()
                                 if "release" in l), "?")
    commit = run(["git", "-C", ROOT, "describe", "--always", "--dirty"]).stdout.strip() or "?"
    return dict(nvcc=version(nvcc), nvdisasm=version(nvdisasm), commit=commit, kernels=kernels)


def groups(measured):
    """Per group: the worst instantiation's numbers (most registers, spills, fewest CTAs; worst loop)."""
    out = {}
    for k in measured["kernels"].values():
        g = out.setdefault(k["group"], dict(n=0, regs=0, spill=0, stack=0, smem=0, threads=k["threads"],
                                            ctas=10 ** 9, limit="", loop=None, source=k["source"],
                                            roles=k.get("roles"), stage=k.get("stage"), stages=k.get("stages")))
        g["n"] += 1
        for m in ("regs", "spill", "stack", "smem"):
            g[m] = max(g[m], k[m])
        if k["ctas"] < g["ctas"]:
            g.update(ctas=k["ctas"], limit=k["limit"], threads=k["threads"])
        if k.get("loop") and (g["loop"] is None or k["loop"]["ipm"] > g["loop"]["ipm"]):
            g["loop"] = k["loop"]
    return out


def values_of(g):
    v = {m: g[m] for m in ("regs", "spill", "ctas")}
    if g["loop"]:
        v.update({m: g["loop"][m] for m in ("ipm", "static_ipm", "int_pct", "control", "sync", "local", "tests",
                                             "mask_free")})
    return v


def worse(metric, value, budget):
    larger_is_worse = METRICS[metric][0]
    return value > budget if larger_is_worse else value < budget


def with_tolerance(metric, value):
    larger_is_worse, tol = METRICS[metric]
    if isinstance(value, bool) or tol == 0 or not larger_is_worse:
        return value
    if metric in ("regs", "int_pct"):
        return min(value + tol, 255) if metric == "regs" else round(value + tol, 1)
    return round(value * (1 + tol), 2) if isinstance(value, float) else math.ceil(value * (1 + tol))


def check(measured, budgets):
    failures, hints, gs = [], [], groups(measured)
    for name, g in sorted(gs.items()):
        asked = register_file(g)
        if asked and asked[0] * g["ctas"] > asked[1]:
            failures.append("%s: setmaxnreg asks for %d registers of the SM's %d (%d CTAs)"
                            % (name, asked[0] * g["ctas"], asked[1], g["ctas"]))
        budget = budgets["budgets"].get(name)
        if budget is None:
            print("kernel report: note: %s has no budget (run with --update to record one)" % name)
            continue
        values = values_of(g)
        for metric in budget:
            value = values.get(metric)
            if value is None:
                failures.append("%s: %s was not measured (no main loop found), budget %s"
                                % (name, metric, budget[metric]))
            elif worse(metric, value, budget[metric]):
                failures.append("%s: %s is %s, budget %s" % (name, metric, value, budget[metric]))
            elif with_tolerance(metric, value) != budget[metric] and worse(metric, budget[metric],
                                                                           with_tolerance(metric, value)):
                hints.append("%s: %s is %s, budget %s" % (name, metric, value, budget[metric]))
    for name in sorted(set(budgets["budgets"]) - set(gs)):
        print("kernel report: note: budget for %s, which no longer exists" % name)
    return failures, hints


def table(rows, header):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def report(measured, budgets):
    gs = groups(measured)
    print("## keel kernel report, sm_90: nvcc %s, nvdisasm %s, commit %s\n" % (measured["nvcc"], measured["nvdisasm"],
                                                                              measured["commit"]))
    rows = [(os.path.basename(g["source"]), n, g["n"], g["regs"], g["spill"], g["stack"], g["smem"], g["threads"],
             g["ctas"], g["limit"]) for n, g in sorted(gs.items(), key=lambda kv: (kv[1]["source"], kv[0]))]
    print(table(rows, ["file", "kernel", "inst.", "regs", "spill B", "stack B", "smem B", "threads", "CTAs/SM",
                       "limit"]))
    loops = [(n, g["loop"]) for n, g in sorted(gs.items()) if g["loop"]]
    print("\nMain loops (per warp and key/query tile; path = cheapest path that runs every HMMA and "
          "issues the next tile's copies):\n")
    print(table([(n, l["line"], "%d/%d = %.1f" % (l["static_instr"], l["static_hmma"], l["static_ipm"]),
                  l["instr"], l["hmma"], l["ipm"], l["hmma_pct"], l["int_pct"], l["control"], l["sync"], l["copies"],
                  l["local"], l["tests"], "yes" if l["mask_free"] else "no") for n, l in loops],
                ["kernel", "loop", "static instr/HMMA", "path instr", "HMMA", "instr/HMMA", "HMMA %",
                 "INT %", "BRA+BSSY+BSYNC", "WARPSYNC+BAR", "LDGSTS", "LDL+STL", "tests", "mask-free"]))
    hopper = [(n, g["threads"], "1 + %d" % (g["threads"] // 128 - 1), g["regs"], g["roles"][0], g["roles"][1],
               "%d / %d" % register_file(g), g.get("stage") or "-", g.get("stages") or "-", g["smem"], g["ctas"])
              for n, g in sorted(gs.items()) if register_file(g)]
    if hopper:
        print("\nWarp roles and the copy pipeline (kernels with setmaxnreg; registers a thread):\n")
        print(table(hopper, ["kernel", "threads", "warpgroups", "regs at launch", "producer", "consumers",
                             "register file", "smem per stage B", "stages", "smem B", "CTAs/SM"]))
    rows = []
    shown = lambda v: {True: "yes", False: "no"}.get(v, v) if isinstance(v, bool) else v
    for pattern, target in budgets.get("targets", {}).items():
        for n, g in gs.items():
            if pattern != "why" and re.fullmatch(pattern, n):
                for metric, want in target.items():
                    have = values_of(g).get(metric)
                    rows.append((n, metric, shown(want), shown(have),
                                 "not yet" if have is None or worse(metric, have, want) else "met"))
    if rows:
        print("\nTargets (reported, not enforced):\n")
        print(table(sorted(rows), ["kernel", "metric", "target", "today", ""]))


def self_test(args, budgets):
    """The ratchet must fail: rerun the check (no compiling) with one budget at a time made tighter
    than today's value, expecting exit status 1 and the kernel and metric named; and with a
    measurement made worse (a loop that lost its mask-free path, consumers asking setmaxnreg for
    more registers than the SM has)."""
    gs = groups(json.load(open(os.path.join(args.out, "measured.json"))))
    g = next(n for n in sorted(gs) if gs[n]["loop"])
    cases = [(g, "regs", gs[g]["regs"] - 1), (g, "ipm", round(gs[g]["loop"]["ipm"] * 0.9, 2)),
             (g, "ctas", gs[g]["ctas"] + 1), (None, None, None)]
    # mask_free can only be tightened where a loop is not mask-free yet; where every loop is, the
    # check is shown the other way round: a measurement that lost its mask-free path must fail.
    tests = next((n for n in sorted(gs) if gs[n]["loop"] and not gs[n]["loop"]["mask_free"]), None)
    regressed = None
    if tests:
        cases.insert(3, (tests, "mask_free", True))
    else:
        regressed = json.load(open(os.path.join(args.out, "measured.json")))
        for k in regressed["kernels"].values():
            if k["group"] == g and k.get("loop"):
                k["loop"]["mask_free"] = False
        cases.insert(3, (g, "mask_free", "measured no"))
    # A setmaxnreg kernel whose consumers ask 64 registers more than the SM has left must fail.
    hopper = next((n for n in sorted(gs) if register_file(gs[n])), None)
    greedy = json.load(open(os.path.join(args.out, "measured.json")))
    if hopper:
        for k in greedy["kernels"].values():
            if k["group"] == hopper:
                k["roles"][1] += 64
        cases.insert(-1, (hopper, "register file", "measured +64"))
    passed = 0
    for group, metric, value in cases:
        tight = json.loads(json.dumps(budgets))
        out = args.out
        with tempfile.TemporaryDirectory() as scratch:
            if value in ("measured no", "measured +64"):  # the real budgets against a regressed measurement
                out = scratch
                json.dump(regressed if value == "measured no" else greedy,
                          open(os.path.join(scratch, "measured.json"), "w"))
            elif group:
                tight["budgets"].setdefault(group, {})[metric] = value
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(tight, f)
            r = run([sys.executable, os.path.abspath(__file__), "--reuse", "--out", out, "--budgets", f.name])
            os.unlink(f.name)
        want = 1 if group else 0
        named = "%s: setmaxnreg asks for" % group if metric == "register file" else "%s: %s is" % (group, metric)
        ok = r.returncode == want and (not group or re.search(re.escape(named), r.stdout))
        print("self-test: %s %s budget %s -> exit %d: %s" % (group or "every", metric or "", value, r.returncode,
                                                                  "ok" if ok else "WRONG"))
        passed += bool(ok)
    print("%d passed, %d failed" % (passed, len(cases) - passed))
    return passed == len(cases)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "build", "kernel-report"), help="cubins and measured.json")
    p.add_argument("--budgets", default=os.path.join(ROOT, "tests", "gpu", "kernel_budgets.json"))
    p.add_argument("--jobs", type=int, default=2, help="parallel nvcc runs (default 2)")
    p.add_argument("--reuse", action="store_true", help="check DIR/measured.json again instead of compiling")
    p.add_argument("--update", action="store_true", help="rewrite the budgets from today's values + tolerance")
    p.add_argument("--self-test", action="store_true", help="show that tightened budgets fail (after a run)")
    args = p.parse_args()
    budgets = json.load(open(args.budgets))
    if args.self_test:
        sys.exit(0 if self_test(args, budgets) else 1)
    if args.reuse:
        measured = json.load(open(os.path.join(args.out, "measured.json")))
    else:
        measured = measure(args, budgets)
        json.dump(measured, open(os.path.join(args.out, "measured.json"), "w"), indent=1)
    report(measured, budgets)
    if args.update:
        text = open(args.budgets).read()
        rows = ['  %s: %s' % (json.dumps(n), json.dumps({m: with_tolerance(m, v) for m, v in values_of(g).items()}))
                for n, g in sorted(groups(measured).items())]
        with open(args.budgets, "w") as f:  # "budgets" is the file's last entry, one line per kernel group
            f.write(text[:text.index('"budgets":')] + '"budgets": {\n' + ",\n".join(rows) + "\n }\n}\n")
        print("\nkernel report: budgets written to %s" % os.path.relpath(args.budgets, ROOT))
        return
    failures, hints = check(measured, budgets)
    for h in hints:
        print("kernel report: better than budget (tighten with --update): " + h)
    for f in failures:
        print("kernel report: FAIL: " + f)
    print("kernel report: %d kernel groups, %d over budget" % (len(groups(measured)), len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
