#!/usr/bin/env python3
"""Every file and every qualified C++ name that README.md and docs/*.md name in backticks exists.

    python3 tests/docs/check_doc_refs.py [SOURCE_DIR]      exit 1 naming each dangling reference
    python3 tests/docs/check_doc_refs.py --self-test       planted dangling references must be found

A reader follows the docs with the code open; a path to a file that moved, or a name such as
`Trainer::result_of` after a rename, sends them nowhere. Checked, in `inline code` only (fenced
blocks are commands and code, checked by the snippet and recipe tests):
  - a path under one of the tree's top-level folders (or one a tutorial in the same doc creates) (`ops/cuda/gelu.cu`, `core/cuda/emu/`,
    `optim/cpu/adamw.{h,cpp}`, `ops/cuda/*.cu`, `trainer.cpp:89`: line numbers are dropped) must
    match a file or folder; a bare file name with a source extension (`trainer_impl.h`) must be
    the name of some file in the tree;
  - a qualified name (`keel::app::MaxLogit`, `nn::GPT2Config::preset`, `Trainer::train_step`)
    must be the tail of a name universal-ctags finds declared in keel's sources (`keel::MaxLogit`
    is not, when the class is keel::app::MaxLogit). Names of other libraries (std::, Eigen::,
    CLI::, ...) are not checked.
"""
import glob, os, re, subprocess, sys, tempfile

TOP = ("apps", "core", "ops", "nn", "optim", "data", "tests", "docs", "examples", "fuzz", "cmake",
       "third_party", ".ci")
SOURCE_EXT = (".h", ".cpp", ".cu", ".cuh", ".py", ".sh")
EXTERNAL_HEADERS = ("cuda", "cublas", "nccl", "mpi", "cudnn", "nvtx", "omp", "curand")  # cuda_runtime.h, ...
FOREIGN = ("std", "Eigen", "CLI", "fmt", "nlohmann", "doctest", "torch", "cub", "cute", "cutlass", "thrust",
           "testing", "F", "nvcuda", "icu", "MPI")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
PATH = re.compile(r"^(?:\./)?((?:%s)/[\w./*{},+-]*)" % "|".join(re.escape(t) for t in TOP))
BARE_FILE = re.compile(r"^[\w.+-]+(%s)$" % "|".join(re.escape(e) for e in SOURCE_EXT))
QUALIFIED = re.compile(r"(?<![\w:])((?:~?\w+::)+~?\w+)")


def inline_spans(text):
    """(line number, span) for each inline code span outside fenced blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            for m in CODE_SPAN.finditer(line):
                yield n, m.group(2)


def expand(path):
    """ops/x.{h,cpp} -> [ops/x.h, ops/x.cpp]"""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [q for alt in m.group(1).split(",") for q in expand(path[:m.start()] + alt + path[m.end():])]


def path_exists(root, path):
    """A file or folder of the tree, or a program built from one (`tests/gpu/compare_metrics`)."""
    path = re.sub(r":[\d\-,]+$", "", path.rstrip(".,;:)"))  # trainer.cpp:89-92
    def exists(p):
        p = os.path.join(root, p)
        return bool(glob.glob(p)) or (not os.path.splitext(p)[1] and any(
            os.path.exists(p + ext) for ext in (".cpp", ".cu", ".sh", ".py")))
    return all(exists(p) for p in expand(path))


def declared_names(root):
    """Every qualified name declared in the sources, as tuples of components: what
    universal-ctags finds (an enumerator under its enum, which ctags leaves unqualified), the
    error classes core/error.h makes with a macro, and the CMake targets keel exports (keel::ops)."""
    dirs = [d for d in ("core", "ops", "nn", "optim", "data", "apps", "tests", "examples", "fuzz")
            if os.path.isdir(os.path.join(root, d))]
    try:
        out = subprocess.run(["ctags", "-R", "--languages=C++", "--langmap=C++:+.cu.cuh", "--extras=+q",
                              "--kinds-C++=+p", "-f", "-"] + dirs, cwd=root, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"check_doc_refs: universal-ctags failed ({e}); install it with `bash .ci/setup --test`")
    names = set()
    for line in out.splitlines():
        if line.startswith("!"):
            continue
        cols = line.split("\t")
        names.add(tuple(cols[0].split("::")))
        fields = cols[3:] if len(cols) > 3 else []
        scope = next((f.split(":", 1)[1] for f in fields if re.match(r"(class|struct|namespace|enum|union):", f)), None)
        if scope:
            names.add(tuple(scope.split("::")) + (cols[0],))
        elif "e" in fields:  # an enumerator of an enum ctags did not scope (`enum class Kind : uint8_t`)
            m = re.search(r"enum\s+(?:class\s+|struct\s+)?(\w+)", cols[2])
            if m:
                names.add((m.group(1), cols[0]))
    for f in glob.glob(os.path.join(root, "core", "*.h")):
        names.update(("keel", m) for m in re.findall(r"KEEL_DEFINE_ERROR\((\w+)\)", open(f).read()))
    for f in glob.glob(os.path.join(root, "**", "CMakeLists.txt"), recursive=True) + [os.path.join(root, "CMakeLists.txt")]:
        names.update(("keel", m) for m in re.findall(r"add_library\(keel_(\w+)", open(f).read()))
    names.add(("keel", "keel"))
    return names


def tails(names):
    """Every suffix of every declared name: `Trainer::train_step` matches keel::app::Trainer::train_step."""
    out = set()
    for n in names:
        for i in range(len(n)):
            out.add(n[i:])
    return out


def problems(root, files, known):
    bad = []
    basenames = {os.path.basename(p) for p in subprocess.run(
        ["git", "ls-files"], cwd=root, capture_output=True, text=True).stdout.split()} or {
        f for _, _, fs in os.walk(root) for f in fs}
    for f in files:
        text = open(f, encoding="utf-8").read()
        rel = os.path.relpath(f, root)
        # The files a tutorial in this doc creates (tests/docs/op_tutorial.py) exist once it is done.
        created = set(re.findall(r"<!-- tutorial: new (\S+) -->", text))
        for n, span in inline_spans(text):
            for word in span.split():
                word = word.strip("(),;'\"")
                if "<" in word or re.search(r"\b[A-Z]{3,}\b", word):
                    continue  # a placeholder: cmd_<name>.cpp, tests/docs/FILE.cpp
                m = PATH.match(word)
                if m and m.group(1).rstrip(".,;:)") not in created and not path_exists(root, m.group(1)):
                    bad.append(f"{rel}:{n}: `{span}`: no file {m.group(1)}")
                elif not m and BARE_FILE.match(re.sub(r":[\d\-,]+$", "", word)) and "/" not in word:
                    name = re.sub(r":[\d\-,]+$", "", word)
                    if name not in basenames and not name.startswith(EXTERNAL_HEADERS):
                        bad.append(f"{rel}:{n}: `{span}`: no file named {name} in the tree")
            for m in QUALIFIED.finditer(span):
                parts = tuple(p.lstrip("~") for p in m.group(1).split("::"))
                if span[m.end():m.end() + 1] == "*":  # detail::check_*: some name begins so
                    if any(k[:-1] == parts[:-1] and k[-1].startswith(parts[-1]) for k in known):
                        continue
                if parts[0] in FOREIGN or (parts[0] == "keel" and len(parts) == 1):
                    continue
                if parts not in known:
                    bad.append(f"{rel}:{n}: `{span}`: nothing in the sources is named {m.group(1)}")
    return bad


def doc_files(root):
    return [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))


def self_test(root):
    known = tails(declared_names(root))
    with tempfile.TemporaryDirectory() as tmp:
        doc = os.path.join(tmp, "planted.md")
        with open(doc, "w") as f:
            f.write("`ops/cuda/gone_kernel.cu` and `keel::MaxLogit` and `Trainer::no_such_step` and `gone_file.h`\n"
                    "`ops/cuda/gelu.cu`, `keel::app::MaxLogit`, `nn::GPT2Config`, `core/cuda/emu/`, "
                    "`optim/cpu/adamw.{h,cpp}`, `std::vector`\n")
        found = problems(root, [doc], known)
    want = ["gone_kernel.cu", "keel::MaxLogit", "Trainer::no_such_step", "gone_file.h"]
    missed = [w for w in want if not any(w in b for b in found)]
    wrong = [b for b in found if ":2:" in b]
    if missed or wrong:
        print("check_doc_refs --self-test FAILED: missed", missed, "flagged valid references", wrong)
        return 1
    print(f"check_doc_refs --self-test: the {len(want)} planted dangling references were found, the valid ones passed")
    return 0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), "..", ".."))
    if "--self-test" in sys.argv:
        return self_test(root)
    files = doc_files(root)
    bad = problems(root, files, tails(declared_names(root)))
    for b in bad:
        print(b)
    print(f"check_doc_refs: {len(files)} files, {len(bad)} dangling reference(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
