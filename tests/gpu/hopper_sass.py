#!/usr/bin/env python3
"""Hopper's instructions, as nvcc assembles them: no GPU needed.

    python3 tests/gpu/hopper_sass.py

Compiles tests/gpu/hopper_instructions.cu (every form of core/cuda/ptx_sm90.cuh and
core/cuda/wgmma.cuh once) for three targets and checks the SASS (nvdisasm) of each:
  sm_90a  every wgmma form is an HGMMA of its shape and type (descriptor A, both transposed,
          register A, register A with B transposed; N 32 the first two only), TMA copies of rank 1 to 5 both ways
          (UTMALDG, UTMASTG) and the bulk group's commit (UTMACMDFLUSH), the bulk copy
          (UBLKCP) and reduction (UBLKRED), the mbarrier's init, arrivals and phase test (SYNCS), the proxy fence,
          setmaxnreg's both ways (USETMAXREG), wgmma's fence and wait (WARPGROUP)
  sm_90   the copies and barriers as on sm_90a; no HGMMA or USETMAXREG (sm_90a only): a trap
  sm_80   none of them: both kernels trap
Exit status 1 names what is missing or present where it must not be. Without nvcc, says so and
exits 0, as the kernel report does.
"""
import os, re, subprocess, sys, tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_report import ROOT, find_tool  # noqa: E402

SOURCE = os.path.join(ROOT, "tests/gpu/hopper_instructions.cu")
WGMMA = [f"HGMMA.64x{n}x16.F32{t}" for n in (64, 128) for t in (".BF16", "")]
WGMMA_SHARED = [f"HGMMA.64x32x16.F32{t}" for t in (".BF16", "")]  # descriptor A only: plain and transposed
COPIES = ["UTMALDG.1D", "UTMALDG.2D", "UTMALDG.3D", "UTMALDG.4D", "UTMALDG.5D", "UTMASTG.1D", "UTMASTG.2D",
          "UTMASTG.3D", "UTMASTG.4D", "UTMASTG.5D", "UTMACMDFLUSH", "UBLKCP.S.G", "UBLKRED.G.S.ADD.F32",
          "SYNCS.EXCH.64", "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK.TRANS64.TRYWAIT", "FENCE.VIEW.ASYNC.S"]
WARPGROUP = ["WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR.LE", "USETMAXREG.DEALLOC", "USETMAXREG.TRY_ALLOC"]


def sass(nvcc, nvdisasm, arch, tmp):
    cubin = os.path.join(tmp, arch + ".cubin")
    r = subprocess.run([nvcc, "-std=c++20", "--expt-relaxed-constexpr", "-O3", "-I" + ROOT, "-arch=" + arch, "-cubin",
                        "-o", cubin, SOURCE], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"hopper_sass: nvcc for {arch} failed:\n{r.stderr}")
    out = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True, check=True).stdout
    # (opcode, operands) of every instruction, a predicate guard dropped
    return re.findall(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);", out, re.M)


def has(instrs, name):
    return [args for op, args in instrs if op == name or op.startswith(name + ".")]


def check(arch, instrs):
    bad = []
    want = {"sm_90a": COPIES + WARPGROUP + WGMMA + WGMMA_SHARED, "sm_90": COPIES, "sm_80": []}[arch]
    never = [n for n in COPIES + WARPGROUP + ["HGMMA"] if not any(w.startswith(n) for w in want)]
    for n in want:
        if not has(instrs, n):
            bad.append(f"{arch}: no {n}")
    for n in never:
        if has(instrs, n):
            bad.append(f"{arch}: {n} where it cannot run")
    if arch != "sm_90a" and not has(instrs, "BPT.TRAP"):
        bad.append(f"{arch}: no trap where Hopper's instructions would be")
    if arch == "sm_90a":
        for shape in WGMMA:  # per shape and type: desc A, A and B transposed, register A, register A with B transposed
            forms = [args for op, args in instrs if op == shape]
            regs_a = [a for a in forms if re.match(r"\s*R\d+, R\d+, gdesc", a)]
            if len(forms) != 4 or len(regs_a) != 2 or not any(".tnspA.tnspB" in a for a in forms) or \
                    not any(".tnspB" in a and ".tnspA" not in a for a in regs_a):
                bad.append(f"sm_90a: {shape}: {forms}")
        for shape in WGMMA_SHARED:
            forms = [args for op, args in instrs if op == shape]
            if len(forms) != 2 or not any(".tnspA.tnspB" in a for a in forms):
                bad.append(f"sm_90a: {shape}: {forms}")
    return bad


def main():
    nvcc, nvdisasm = find_tool("nvcc"), find_tool("nvdisasm")
    if not nvcc:
        print("hopper_sass: skipped: nvcc not found, nothing checked")
        return 0
    if not nvdisasm:
        sys.exit("hopper_sass: nvdisasm not found; `bash .ci/setup --test` installs it from PyPI")
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("sm_90a", "sm_90", "sm_80"):
            instrs = sass(nvcc, nvdisasm, arch, tmp)
            kinds = ("HGMMA", "UTMALDG", "UTMASTG", "UTMACMDFLUSH", "UBLKCP", "UBLKRED", "SYNCS", "USETMAXREG",
                     "WARPGROUP", "BPT")
            found = sorted({op for op, _ in instrs if op.split(".")[0] in kinds})
            print(f"hopper_sass: {arch}: {', '.join(found)}")
            bad += check(arch, instrs)
    for b in bad:
        print("hopper_sass: FAILED:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
