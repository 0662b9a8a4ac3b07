#!/usr/bin/env python3
"""What nvcc made, read back, for the kernel report (kernel_report.py) and loop_report.py:
kernel names (demangled, split into name and template arguments, grouped across type
arguments), and the main loop of a kernel's SASS: nvdisasm's listing parsed into instructions
with their outermost source line, cut into basic blocks, the natural loops found (a back edge to
a block that dominates it), the main loop chosen (the innermost with the most tensor-core work:
an HGMMA.64xNx16 counts as N / 8 m16n8k16 HMMAs, mma_weight), and the cheapest path through it
that runs every HMMA and issues the next tile's copies, counted by kind of instruction
(loop_metrics). And an SM's arithmetic: resident blocks (occupancy), and the register file that
setmaxnreg's grants ask of it (register_file).
"""
import os, re, subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def demangle(names):
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return dict(zip(names, r.stdout.splitlines())) if r.returncode == 0 else {n: n for n in names}


def split_name(demangled):
    """'void keel::cuda::(anonymous namespace)::k<__half, 128>(...)' -> ('k', ['__half', '128'])."""
    text = demangled.replace("(anonymous namespace)::", "")
    text = re.sub(r"^void ", "", text)
    depth, args, cur, name = 0, [], "", ""
    for ch in text:
        if ch == "(" and depth == 0:
            break
        if ch == "<":
            depth += 1
            if depth == 1:
                continue
        elif ch == ">":
            depth -= 1
            if depth == 0:
                args.append(cur.strip())
                continue
        elif ch == "," and depth == 1:
            args.append(cur.strip())
            cur = ""
            continue
        if depth == 0:
            name += ch
        else:
            cur += ch
    return name.split("::")[-1], args


SHORT_TYPES = {"__nv_bfloat16": "bf16", "__half": "f16", "float": "f32", "double": "f64", "long": "i64", "int": "i32"}


def group_of(name, args):
    """Kernels that differ only in type arguments share a group (and a budget)."""
    values = [a if a in ("true", "false") else re.sub(r"[a-z]+$", "", a)
              for a in args if re.fullmatch(r"-?\d+[a-z]*|true|false", a)]
    return name + ("<%s>" % ", ".join(values) if values else "")


# sm_90 (H100, H200), as CUDA's cuda_occupancy.h computes it: 64K registers in 4 sub-partitions,
# allocated per warp in units of 256; 228 KB of shared memory, 1 KB reserved per block, 128-byte units.
SM90 = dict(regs_per_partition=16384, partitions=4, reg_unit=256, smem=228 * 1024, smem_reserved=1024,
            smem_unit=128, max_threads=2048, max_ctas=32)
INT_OPS = {"IADD3", "IADD", "IADD32I", "IMAD", "IMUL", "IMNMX", "IABS", "ISETP", "LEA", "LOP", "LOP3", "LOP32I",
           "SHF", "SHL", "SHR", "SEL", "PRMT", "MOV", "MOV32I", "VIADD", "VIADDMNMX", "VIMNMX", "BMSK", "BREV",
           "FLO", "POPC", "PLOP3", "SGXT", "BFE", "BFI"}  # a leading U (uniform datapath) counts too
CONTROL_OPS = {"BRA", "BRX", "JMP", "JMX", "CALL", "RET", "BSSY", "BSYNC", "BREAK", "EXIT"}
SYNC_OPS = {"WARPSYNC", "BAR"}

INSTR = re.compile(r"^\s+/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?)\s*;")
LINE = re.compile(r'^\s*//## File "([^"]+)", line (\d+)(\s+inlined at)?')


def parse_sass(text):
    """nvdisasm -c -gi output -> {mangled: [instruction dicts]}; `line` is the outermost source line."""
    funcs, cur, labels, where = {}, None, [], None
    for line in text.splitlines():
        if line.startswith(".text."):
            cur, where = funcs.setdefault(line[6:].rstrip(":"), []), None
        elif re.match(r"^\.L_x_\d+:", line):
            labels.append(line.rstrip(":"))
        elif LINE.match(line):
            m = LINE.match(line)
            if not m.group(3):
                where = (os.path.relpath(os.path.normpath(m.group(1)), ROOT), int(m.group(2)))
        elif INSTR.match(line) and cur is not None:
            m = INSTR.match(line)
            cur.append(dict(pred=(m.group(2) or "").strip(), op=m.group(3), base=m.group(3).split(".")[0],
                            args=m.group(4), labels=labels, where=where))
            labels = []
    return funcs


def basic_blocks(ins):
    label_at = {label: i for i, x in enumerate(ins) for label in x["labels"]}
    leaders = {0} | {i for i, x in enumerate(ins) if x["labels"]}
    leaders |= {i + 1 for i, x in enumerate(ins) if x["base"] in ("BRA", "BRX", "JMP", "JMX", "EXIT", "RET")}
    leaders = sorted(i for i in leaders if i < len(ins))
    blocks = [dict(ins=ins[a:b], succ=[]) for a, b in zip(leaders, leaders[1:] + [len(ins)])]
    block_of = {first: k for k, first in enumerate(leaders)}
    for k, b in enumerate(blocks):
        last, falls = b["ins"][-1], True
        if last["base"] == "BRA":
            b["succ"].append(block_of[label_at[re.search(r"(\.L_x_\d+)", last["args"]).group(1)]])
            falls = bool(last["pred"]) or "," in last["args"].split("`")[0]  # @P BRA, or BRA P, target
        elif last["base"] in ("BRX", "JMP", "JMX", "EXIT", "RET"):
            falls = bool(last["pred"]) and last["base"] in ("EXIT", "RET")
        if falls and k + 1 < len(blocks):
            b["succ"].append(k + 1)
    return blocks


def natural_loops(blocks):
    """{head: body} of every natural loop (a back edge k -> h, h dominating k)."""
    preds = {k: [] for k in range(len(blocks))}
    for k, b in enumerate(blocks):
        for s in b["succ"]:
            preds[s].append(k)
    reach, stack = {0}, [0]
    while stack:
        for s in blocks[stack.pop()]["succ"]:
            if s not in reach:
                reach.add(s), stack.append(s)
    dom = {k: set(reach) for k in reach}
    dom[0], changed = {0}, True
    while changed:
        changed = False
        for k in sorted(reach - {0}):
            new = set.intersection(*[dom[p] for p in preds[k] if p in reach]) | {k}
            changed, dom[k] = changed or new != dom[k], new
    loops = {}
    for k in reach:
        for h in blocks[k]["succ"]:
            if h in dom[k]:
                body, stack = loops.setdefault(h, {h}), [k]
                while stack:
                    n = stack.pop()
                    if n not in body:
                        body.add(n), stack.extend(preds[n])
    return loops


def main_loop(blocks):
    """The natural loop that holds the most HMMA (mma_weight)."""
    loops = natural_loops(blocks)
    hmma = lambda ks: sum(mma_weight(x) for k in ks for x in blocks[k]["ins"])
    if not loops or not max(hmma(b) for b in loops.values()):
        return None, None
    head = max(loops, key=lambda h: (hmma(loops[h]), len(loops[h])))
    return head, loops[head]


def register_roles(ins):
    """setmaxnreg's registers a thread, as a kernel's SASS asks for them: (the fewest a DEALLOC leaves
    (the producer's), the most a TRY_ALLOC grows to (the consumers')), or None without setmaxnreg."""
    asks = {"DEALLOC": [], "TRY_ALLOC": []}
    for x in ins:
        if x["base"] == "USETMAXREG":
            kind = "DEALLOC" if ".DEALLOC" in x["op"] else "TRY_ALLOC"
            asks[kind].append(int(re.search(r"0x[0-9a-f]+|\d+$", x["args"].strip()).group(0), 0))
    if not asks["DEALLOC"] and not asks["TRY_ALLOC"]:
        return None
    return (min(asks["DEALLOC"], default=None), max(asks["TRY_ALLOC"], default=None))


def mma_weight(x):
    """A tensor-core instruction in m16n8k16 products of one warp: HMMA.16816 is 1; a warp's share
    of HGMMA.64xNx16 (16 rows of the warpgroup's 64) is N / 8. So the loops of the mma.sync and
    the wgmma kernels are measured in the same unit."""
    if x["base"] == "HMMA":
        return 1
    # INSTR's opcode stops at the lower-case x: "HGMMA.64", then "x128x16.F32..." in the arguments.
    m = re.match(r"HGMMA\.64x(\d+)x16", x["op"] + x["args"]) if x["base"] == "HGMMA" else None
    return int(m.group(1)) // 8 if m else 0


def reduced(x):
    """Elements a global reduction instruction adds into (RED.E.ADD.F32x2: 2), else 0."""
    if x["base"] not in ("RED", "ATOM", "REDG", "ATOMG"):
        return 0
    # INSTR's opcode stops at the lower-case x of F32x2, so the width starts the arguments' text.
    m = re.match(r"x(\d+)", x["args"]) if re.search(r"F\d+$", x["op"]) else None
    return int(m.group(1)) if m else 1


def cheapest_path(blocks, head, body, copies):
    """From the loop head back to it, every edge that goes backwards in the code cut (inner loops
    run once): the path with the most HMMA (mma_weight) that issues exactly `copies` LDGSTS, then the most
    elements added by global reductions (a full tile's dQ adds in the attention backward, which a
    path around their bounds tests would leave out), and of those the fewest instructions. Dynamic programming over
    (block, LDGSTS so far) in code order."""
    best = {head: {0: (0, 0, 0, None)}}  # block -> LDGSTS before it -> (HMMA, elements reduced, -instructions, came from)
    ends = []
    for k in sorted(body):
        for c, (hm, red, neg, _) in sorted(best.get(k, {}).items()):
            ins = blocks[k]["ins"]
            hm, neg = hm + sum(mma_weight(x) for x in ins), neg - len(ins)
            red += sum(reduced(x) for x in ins)
            c2 = c + sum(x["base"] == "LDGSTS" for x in ins)
            for s in blocks[k]["succ"]:
                if s == head and c2 == copies:
                    ends.append((hm, red, neg, k, c))
                elif s > k and s in body and (hm, red, neg) > best.setdefault(s, {}).get(c2, (-1, 0, 0))[:3]:
                    best[s][c2] = (hm, red, neg, (k, c))
    if not ends:
        raise ValueError("no path through the loop issues %d cp.async copies" % copies)
    _, _, _, k, c = max(ends)
    path = []
    while k is not None:
        path.append(k)
        k, c = best[k][c][3] or (None, None)
    return path[::-1]


def loop_metrics(ins, source, copies, scores, pick=main_loop):
    blocks = basic_blocks(ins)
    head, body = pick(blocks)
    if head is None:
        return None
    path = cheapest_path(blocks, head, body, copies)
    on_path = [x for k in path for x in blocks[k]["ins"]]
    static = [x for k in body for x in blocks[k]["ins"]]
    count = lambda xs, ops: sum(x["base"] in ops or (x["base"][0] == "U" and x["base"][1:] in ops) for x in xs)
    n, hmma, static_hmma = len(on_path), sum(map(mma_weight, on_path)), sum(map(mma_weight, static))
    mma_instr = count(on_path, {"HMMA", "HGMMA"})  # instructions, not products: the tensor cores' share of issue
    tests = sum(x["base"] == "BRA" and bool(x["pred"] or "," in x["args"].split("`")[0]) for x in on_path)
    tests -= 1 if len(blocks[path[-1]]["succ"]) > 1 else 0  # the loop's own conditional back edge
    tests += count(on_path, {"FSEL", "SEL"})
    latch = blocks[path[-1]]["ins"][-1]["where"]
    return dict(line="%s:%d" % (os.path.basename(latch[0]), latch[1]) if latch else "?", instr=n, hmma=hmma,
                ipm=round(n / hmma, 2), hmma_pct=round(100 * mma_instr / n, 1),
                int_pct=round(100 * count(on_path, INT_OPS) / n, 1), control=count(on_path, CONTROL_OPS),
                sync=count(on_path, SYNC_OPS), copies=count(on_path, {"LDGSTS"}),
                local=count(on_path, {"LDL", "STL"}), tests=tests, mask_free=tests < scores,
                static_instr=len(static), static_hmma=static_hmma, static_ipm=round(len(static) / static_hmma, 2))


def occupancy(regs, smem_bytes, threads):
    """Resident blocks per SM and what limits them (cuda_occupancy.h's arithmetic for sm_90)."""
    warps = -(-threads // 32)
    per_warp = -(-regs * 32 // SM90["reg_unit"]) * SM90["reg_unit"]
    by_regs = (SM90["regs_per_partition"] // per_warp * SM90["partitions"]) // warps if per_warp else 10 ** 9
    alloc = -(-(smem_bytes + SM90["smem_reserved"]) // SM90["smem_unit"]) * SM90["smem_unit"]
    by_smem = SM90["smem"] // alloc
    limits = {"regs": by_regs, "smem": by_smem, "threads": SM90["max_threads"] // threads, "blocks": SM90["max_ctas"]}
    n = min(limits.values())
    return n, "+".join(k for k in limits if limits[k] == n)


def register_file(g):
    """(registers setmaxnreg asks of the SM for one block: 128 threads at the producer's count, the
    rest at the consumers', 65536), or None for a kernel without setmaxnreg. A TRY_ALLOC the SM
    cannot grant waits forever: a hang on a GPU that no emulator shows."""
    if not g.get("roles") or None in g["roles"]:
        return None
    producer, consumer = g["roles"]
    return 128 * producer + (g["threads"] - 128) * consumer, 65536
