#!/usr/bin/env python3
"""keel's rule that a function is short enough to read in one sitting: under LIMIT (80) lines,
signature to closing brace, in the library and the app (core ops nn optim data apps; not
apps/bench, whose programs are scripts, nor tests).

    python3 tests/docs/function_length.py [--root DIR] [--limit N] [--self-test]

Exit status 1 names every function over the limit (file:line, name, length), and every entry of
ALLOWED that no longer needs to be there. --self-test plants a tree with an 81-line function and
checks that the check fails on it, and on nothing else.

The parser is a heuristic brace matcher, not a compiler: comments, strings, character literals
and preprocessor lines are blanked first, then a `{` at namespace or class scope whose header ends
in a parameter list (and qualifiers, a trailing return type or a constructor's initialisers)
opens a function; everything inside it, lambdas and local classes too, counts toward it.
"""
import argparse
import os
import re
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIRS = ("core", "ops", "nn", "optim", "data", "apps")
EXCLUDED = ("apps/bench/",)
SOURCE = re.compile(r"\.(h|hpp|cpp|cc|cu|cuh)$")

# Functions allowed over the limit, by file and name (not line: lines move), each with its reason.
# An entry whose function is gone or back under the limit fails the check, so the list cannot
# outlive its reasons. The kernel report is tests/gpu/kernel_report.py.
KERNEL = ("a kernel whose loop state lives in registers; its comment says why it stays one function, "
          "and a split must keep the kernel report's numbers")
ALLOWED = {
    ("ops/cuda/attention_mma_backward.cu", "backward_tiles"): KERNEL,
    ("ops/cuda/attention_mma_forward.cu", "attention_mma_forward_kernel"): KERNEL,
    ("ops/cuda/attention_forward.cu", "attention_forward_kernel"): KERNEL,
    ("ops/cuda/decode_attention.cu", "decode_partial_kernel"): KERNEL,
    ("ops/cuda/attention_backward.cu", "attention_dkdv_kernel"): KERNEL,
}


def blank(text):
    """text with every character but newlines turned into spaces (line numbers survive)."""
    return re.sub(r"[^\n]", " ", text)


def literal_prefix(src, i):
    """The identifier characters just before src[i] (a string's prefix: u8, L, R, ... or a number)."""
    j = i
    while j > 0 and (src[j - 1].isalnum() or src[j - 1] in "_."):
        j -= 1
    return src[j:i]


def strip(src):
    """src with comments, string and character literals and preprocessor lines blanked."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c == '"' and literal_prefix(src, i).endswith("R"):  # R"delim( ... )delim"
            m = re.match(r'"([^()\\\s]{0,16})\(', src[i:])
            end = src.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
        elif c == "'" and literal_prefix(src, i)[:1].isdigit():  # a digit separator: 100'000
            j = i + 1
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
        elif c == "#" and src[src.rfind("\n", 0, i) + 1:i].strip() == "":  # a directive, with continuations
            j = i
            while True:
                k = src.find("\n", j)
                k = n if k < 0 else k
                if k > 0 and src[k - 1] == "\\" and k < n:
                    j = k + 1
                    continue
                break
            j = k
        else:
            out.append(c)
            i += 1
            continue
        if c in "\"'" and j - i >= 2:  # a literal keeps its quotes: `extern "C" {` stays recognisable
            out.append(c + blank(src[i + 1:j - 1]) + src[j - 1])
        else:
            out.append(blank(src[i:j]))
        i = j
    return "".join(out)


def remove_calls(text, names):
    """text without `name( ... )` (balanced) for each name: __launch_bounds__(128), alignas(16)."""
    for name in names:
        while True:
            m = re.search(r"\b" + name + r"\s*\(", text)
            if not m:
                break
            depth, j = 0, m.end() - 1
            while j < len(text):
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                if depth == 0:
                    break
                j += 1
            text = text[:m.start()] + " " + text[j + 1:]
    return text


def function_name(header):
    """The name a function's header declares: `Tensor& Foo::bar(int x) const` -> Foo::bar."""
    h = remove_calls(header, ("__launch_bounds__", "__attribute__", "alignas", "__declspec"))
    h = re.sub(r"\[\[.*?\]\]", " ", h, flags=re.S)
    h = re.sub(r"^\s*template\s*<[^{};]*?>(?=\s*[\w:~\[])", " ", h, flags=re.S)
    op = re.search(r"\boperator\s*(\(\s*\)|[^\s(]+)\s*\(", h)
    if op:
        symbol = op.group(1).replace(" ", "")
        return (re.split(r"\s+", h[:op.start()].strip() + " operator")[-1].lstrip("*&")
                + (" " if symbol[0].isalpha() else "") + symbol)
    return re.split(r"\s+", h.split("(")[0].strip())[-1].lstrip("*&")


SCOPE = re.compile(r'\b(namespace|class|struct|union|enum)\b[^()]*$|\bextern\s*"[^"]*"\s*$')
TAIL = re.compile(r"^(\s|const|override|noexcept|final|mutable|volatile|&|->[^{;]*|:.*)*$", re.S)


def functions(src):
    """(first line, last line, name) of every function defined at namespace or class scope."""
    src = strip(src)
    stack, found, header_start, paren = [], [], 0, 0

    def line_of(pos):
        return src.count("\n", 0, pos) + 1

    for i, c in enumerate(src):
        if not all(kind == "scope" for kind in stack):  # inside a function, an initialiser or a brace in parentheses
            if c == "{":
                stack.append("other")
            elif c == "}":
                top = stack.pop()
                if isinstance(top, tuple):
                    _, start, header = top
                    found.append((line_of(start), line_of(i), function_name(header)))
                    header_start, paren = i + 1, 0
            continue
        if c == "(":
            paren += 1
        elif c == ")":
            paren -= 1
        elif c == ";" and paren == 0:
            header_start = i + 1
        elif c == "{":
            header = src[header_start:i].strip()
            if paren > 0:
                stack.append("inner")
                continue
            if SCOPE.search(header) or header == "":
                stack.append("scope")
                header_start = i + 1
                continue
            close = header.rfind(")")
            tail = header[close + 1:]
            if (close >= 0 and TAIL.match(tail) and not re.search(r"=\s*$", header)
                    and not re.match(r"^\s*:.*[\w>]$", tail, re.S)):
                start = header_start
                while src[start] in " \n\t":
                    start += 1
                stack.append(("func", start, header))
            elif re.search(r"[\w>]\s*$", header):
                stack.append("inner")  # a braced initialiser: `int x{3};`
            else:
                stack.append("other")
        elif c == "}" and stack:
            if stack.pop() in ("scope", "other"):
                header_start = i + 1
    return found


def sources(root):
    """The files the rule covers, relative to root, sorted."""
    files = []
    for top in DIRS:
        for dirpath, dirnames, names in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in names:
                rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                if SOURCE.search(name) and not rel.startswith(EXCLUDED):
                    files.append(rel)
    return sorted(files)


def check(root, limit, allowed):
    """The problems of the tree at root, one line each: long functions, then stale allowances."""
    files = sources(root)
    if not files:
        return [f"{root}: no C++ or CUDA sources under {', '.join(DIRS)}: is --root the repository?"]
    problems, longest = [], {}
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for first, last, name in functions(text):
            length = last - first + 1
            longest[(rel, name)] = max(longest.get((rel, name), 0), length)
            if length > limit and (rel, name) not in allowed:
                problems.append(f"{rel}:{first}: {name} is {length} lines, over the limit of {limit}: "
                                "split it into helpers that each do one named thing")
    for (rel, name), reason in sorted(allowed.items()):
        if (rel, name) not in longest:
            problems.append(f"{rel}: {name} is allowed over the limit ({reason}) but there is no such "
                            "function: remove it from ALLOWED in tests/docs/function_length.py")
        elif longest[(rel, name)] <= limit:
            problems.append(f"{rel}: {name} is allowed over the limit ({reason}) but is "
                            f"{longest[(rel, name)]} lines now: remove it from ALLOWED in "
                            "tests/docs/function_length.py")
    return problems


def planted_function(head, body_lines, name):
    """A function of exactly body_lines + 2 lines (header, body, closing brace) whose body holds
    braces only in strings, characters and comments, as a parser that skipped them would miscount."""
    body = ['  const char* s = "{ {";  // }', "  char c = '{';  /* { */", "  int n = 1'000; char d = '}';"]
    body += [f"  n += {i};" for i in range(body_lines - len(body) - 1)] + ["  return n + s[0] + c + d;"]
    return [head.format(name=name)] + body + ["}"]


def self_test():
    """The check run over a planted tree must report exactly the planted faults."""
    planted = {
        # 81 lines from the template line: over; 80: within. Helpers before, a class after.
        "core/planted.cpp": (["namespace keel {", "namespace {", "int helper() { return 1; }", "}  // namespace", ""]
                             + ["template <typename T>"] + planted_function("T too_long(T x) {{", 78, "")
                             + [""] + planted_function("int {name}(int x) {{", 78, "fits")
                             + ["", "struct Holder {", "  Holder() : x_{1} {}"]
                             + ["  " + line for line in planted_function("int {name}() const {{", 79, "member")]
                             + ["  int x_;", "};", "}  // namespace keel", ""]),
        # apps/bench is outside the rule.
        "apps/bench/planted.cpp": planted_function("int {name}() {{", 100, "bench_main"),
        # A kernel: allowed, allowed but short, not allowed (its name behind __launch_bounds__).
        "ops/cuda/planted.cu": (["template <int N>", "__global__ void __launch_bounds__(128, 1)"]
                                + planted_function("    allowed_kernel(float* x) {{", 90, "")
                                + planted_function("__global__ void {name}(float* x) {{", 10, "short_kernel")
                                + ["__global__ void __launch_bounds__(256)"]
                                + planted_function("    {name}(float* x) {{", 79, "new_kernel")),
    }
    allowed = {("ops/cuda/planted.cu", "allowed_kernel"): "planted",
               ("ops/cuda/planted.cu", "short_kernel"): "planted",
               ("ops/cuda/gone.cu", "gone_kernel"): "planted"}
    expected = [
        "core/planted.cpp:6: too_long is 81 lines, over the limit of 80",
        "core/planted.cpp:171: member is 81 lines, over the limit of 80",
        "ops/cuda/planted.cu:107: new_kernel is 82 lines, over the limit of 80",
        "ops/cuda/gone.cu: gone_kernel is allowed over the limit (planted) but there is no such function",
        "ops/cuda/planted.cu: short_kernel is allowed over the limit (planted) but is 12 lines now",
    ]
    with tempfile.TemporaryDirectory() as root:
        for rel, lines in planted.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
        got = check(root, 80, allowed)
        clean = check(root, 200, {})
    failures = []
    if len(got) != len(expected) or not all(g.startswith(e) for g, e in zip(got, expected)):
        failures.append("the planted tree gave:\n  " + "\n  ".join(got) + "\nexpected:\n  " + "\n  ".join(expected))
    if clean:
        failures.append("at a limit of 200 the planted tree gave:\n  " + "\n  ".join(clean))
    for f in failures:
        print("function_length --self-test FAILED:", f)
    if not failures:
        print(f"function_length --self-test: the planted tree fails with exactly the {len(expected)} planted faults")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=ROOT, help="the repository (default: this script's)")
    parser.add_argument("--limit", type=int, default=80, help="the most lines a function may have")
    parser.add_argument("--self-test", action="store_true", help="check the check on a planted tree")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    problems = check(args.root, args.limit, ALLOWED)
    for p in problems:
        print(p)
    if problems:
        print(f"function_length: {len(problems)} problem(s); the rule and its allowances are in {__file__}")
        return 1
    print(f"function_length: every function under {' '.join(DIRS)} (not {' '.join(EXCLUDED)}) is at most "
          f"{args.limit} lines, save {len(ALLOWED)} allowed kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
