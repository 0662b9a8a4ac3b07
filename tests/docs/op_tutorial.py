#!/usr/bin/env python3
"""Applies the "add an op" tutorial of docs/ops.md to a copy of the tree.

    python3 tests/docs/op_tutorial.py DOC TREE

Each fenced block of DOC preceded by a directive line is applied to TREE, in order:
    <!-- tutorial: new PATH -->             the block is the whole of a new file PATH
    <!-- tutorial: PATH after "TEXT" -->    the block's lines go after the first line of PATH
                                            that contains TEXT
A directive whose file exists already (new) or whose TEXT is not found stops with a message
naming it: the tutorial no longer fits the tree, and must be updated with it.
"""
import os, re, sys

DIRECTIVE = re.compile(r'^<!-- tutorial: (?:new (?P<new>\S+)|(?P<path>\S+) after "(?P<text>.*)") -->$')


def steps(doc):
    """(line number, directive match, block text) for each directive and the fenced block after it."""
    lines = open(doc, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        m = DIRECTIVE.match(lines[i].strip())
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        k = j + 1
        while k < len(lines) and not lines[k].startswith("```"):
            k += 1
        if j >= len(lines) or k >= len(lines):
            sys.exit(f"{doc}:{i + 1}: a tutorial directive with no fenced block after it")
        yield i + 1, m, "\n".join(lines[j + 1:k]) + "\n"
        i = k + 1


def apply(doc, tree):
    n = 0
    for line, m, block in steps(doc):
        where = f"{doc}:{line}"
        if m.group("new"):
            path = os.path.join(tree, m.group("new"))
            if os.path.exists(path):
                sys.exit(f"{where}: {m.group('new')} exists already in the tree")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w", encoding="utf-8").write(block)
        else:
            path = os.path.join(tree, m.group("path"))
            if not os.path.exists(path):
                sys.exit(f"{where}: {m.group('path')} is not in the tree")
            text = open(path, encoding="utf-8").read().splitlines(keepends=True)
            at = next((i for i, l in enumerate(text) if m.group("text") in l), None)
            if at is None:
                sys.exit(f"{where}: no line of {m.group('path')} contains {m.group('text')!r}")
            text[at + 1:at + 1] = [block]
            open(path, "w", encoding="utf-8").write("".join(text))
        n += 1
    if n == 0:
        sys.exit(f"{doc}: no tutorial directives")
    print(f"op_tutorial: applied {n} blocks of {doc} to {tree}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    apply(sys.argv[1], sys.argv[2])
