#!/usr/bin/env bash
# The folder dependency rule, checked: every `#include "..."` in src/ and kernels/ must follow
# the table between the `deps-table` markers in docs/ARCHITECTURE.md (the table is the single
# source: the docs cannot drift from the check). Fails naming file:line and the forbidden edge;
# also fails when the table itself allows a cycle or a folder has no row. tests/ may include
# anything.
#   scripts/check-deps.sh [REPO]             check the tree (default: this script's repository)
#   scripts/check-deps.sh --selftest [REPO]  the check must pass on a copy of the tree and fail
#                                            on copies with a reverse include, a kernels/ include
#                                            of src/, and a table that allows a cycle
set -euo pipefail
exec /usr/bin/python3 - "$0" "$@" <<'PY'
import os, re, shutil, subprocess, sys, tempfile

script = os.path.abspath(sys.argv[1])
args = sys.argv[2:]
selftest = "--selftest" in args
args = [a for a in args if a != "--selftest"]
repo = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(script), ".."))

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def read_table(repo):
    """({node: allowed nodes}, {node: the only nodes that may include it}) from the markdown
    table between the deps-table markers: | `folder` | `may` `include` | `only` `from` |."""
    doc = os.path.join(repo, "docs", "ARCHITECTURE.md")
    text = open(doc, encoding="utf-8").read()
    m = re.search(r"<!-- deps-table -->(.*?)<!-- /deps-table -->", text, re.S)
    if not m:
        sys.exit(f"{doc}: no <!-- deps-table --> ... <!-- /deps-table --> section")
    table, private = {}, {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue  # header, separator, prose
        node = cells[0].strip("`")
        table[node] = set(re.findall(r"`([^`]+)`", cells[1]))
        if len(cells) > 2 and "`" in cells[2]:
            private[node] = set(re.findall(r"`([^`]+)`", cells[2]))
    return table, private


def node_of(rel, table):
    """The table row a repository path belongs to: the most specific listed folder."""
    parts = rel.split("/")
    if parts[0] == "kernels":
        return "kernels"
    if parts[0] != "src" or len(parts) < 3:
        return None
    for depth in range(len(parts) - 1, 1, -1):
        cand = "/".join(parts[1:depth])
        if cand in table:
            return cand
    return parts[1]


def top(node):
    return node.split("/")[0]


def resolve(inc, src_file):
    """Repository-relative path of an include, or None if it names no file of the tree."""
    for base in (os.path.dirname(src_file), os.path.join(repo_now, "src"), repo_now):
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(p) and p.startswith(repo_now + os.sep):
            return os.path.relpath(p, repo_now)
    return None


def table_cycle(table):
    graph = {}
    for node, allowed in table.items():
        graph.setdefault(top(node), set()).update(top(a) for a in allowed if top(a) != top(node))
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def check(repo):
    global repo_now
    repo_now = repo
    table, private = read_table(repo)
    errors = []
    cycle = table_cycle(table)
    if cycle:
        errors.append("docs/ARCHITECTURE.md: the dependency table allows a cycle: " + " -> ".join(cycle))
    if "kernels" in table and table["kernels"]:
        errors.append("docs/ARCHITECTURE.md: kernels must be a leaf (include nothing from src/)")
    for folder in sorted(os.listdir(os.path.join(repo, "src"))):
        if os.path.isdir(os.path.join(repo, "src", folder)) and folder not in table:
            errors.append(f"src/{folder}: no row in the dependency table of docs/ARCHITECTURE.md")
    for root in ("src", "kernels"):
        for d, _, files in os.walk(os.path.join(repo, root)):
            for f in sorted(files):
                path = os.path.join(d, f)
                rel = os.path.relpath(path, repo)
                node = node_of(rel, table)
                if node is None or not f.endswith((".h", ".hpp", ".cpp", ".cu", ".cuh", ".inc")):
                    continue
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for no, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = resolve(m.group(1), path)
                        if target is None:
                            continue  # names no file of the tree (a system or generated header)
                        dst = node_of(target, table)
                        if dst is None or dst == node:
                            continue
                        if dst in private and node not in private[dst]:
                            errors.append(f'{rel}:{no}: {node} -> {dst} is not allowed (#include "{m.group(1)}"); '
                                          f'{dst} is included only from: ' + " ".join(sorted(private[dst])))
                            continue
                        if top(dst) == top(node) and node != "kernels":
                            continue
                        if dst not in table.get(node, set()) and top(dst) not in table.get(node, set()):
                            allowed = " ".join(sorted(table.get(node, set()))) or "nothing"
                            errors.append(f'{rel}:{no}: {node} -> {dst} is not allowed '
                                          f'(#include "{m.group(1)}"); {node} may include: {allowed}')
    return errors


def run_selftest():
    failures = []

    def copy():
        tmp = tempfile.mkdtemp(prefix="check-deps-")
        for part in ("src", "kernels", "docs"):
            if os.path.isdir(os.path.join(repo, part)):
                shutil.copytree(os.path.join(repo, part), os.path.join(tmp, part))
        return tmp

    def expect(name, tmp, needle):
        errors = check(tmp)
        shutil.rmtree(tmp)
        ok = (not errors) if needle is None else any(needle in e for e in errors)
        print(f"selftest {name}: {'ok' if ok else 'FAILED'}")
        if not ok:
            failures.append(f"{name}: expected {'a clean pass' if needle is None else repr(needle)}, got: " +
                            ("; ".join(errors) or "a clean pass"))

    expect("clean tree passes", copy(), None)

    tmp = copy()  # a reverse include: the lowest folder reaching for the highest
    path = os.path.join(tmp, "src", "util", "error.h")
    lines = open(path).read().count("\n")
    with open(path, "a") as f:
        f.write('#include "train/trainer.h"\n')
    expect("reverse include fails", tmp, f"src/util/error.h:{lines + 1}: util -> train is not allowed")

    tmp = copy()  # kernels/ is a leaf
    os.makedirs(os.path.join(tmp, "kernels"), exist_ok=True)
    with open(os.path.join(tmp, "kernels", "selftest_kernel.cuh"), "w") as f:
        f.write('#pragma once\n#include "tensor/tensor.h"\n')
    expect("kernels including src fails", tmp, "kernels/selftest_kernel.cuh:2: kernels -> tensor is not allowed")

    tmp = copy()  # a backend's own files are private to src/backend
    path = os.path.join(tmp, "src", "model", "config.h")
    lines = open(path).read().count("\n")
    with open(path, "a") as f:
        f.write('#include "backend/cpu/cpu_math.h"\n')
    expect("a backend's own header from above fails", tmp,
           f"src/model/config.h:{lines + 1}: model -> backend/cpu is not allowed")

    tmp = copy()  # a table that allows util <-> tensor
    doc = os.path.join(tmp, "docs", "ARCHITECTURE.md")
    text = open(doc).read()
    text2 = re.sub(r"(\| `util` \|)[^|\n]*\|", r"\1 `tensor` |", text, count=1)
    open(doc, "w").write(text2)
    expect("table with a cycle fails", tmp, "the dependency table allows a cycle")

    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)
    print("check-deps selftest: ok")


if selftest:
    run_selftest()
    sys.exit(0)
errors = check(repo)
if errors:
    print("\n".join(errors), file=sys.stderr)
    print(f"check-deps: {len(errors)} problem(s); the rule is the table in docs/ARCHITECTURE.md", file=sys.stderr)
    sys.exit(1)
print("check-deps: every include follows docs/ARCHITECTURE.md's dependency table")
PY
