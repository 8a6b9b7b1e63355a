"""Checks the repository's Dockerfile without Docker (docker build cannot run on the test
machines): everything it names must exist.

- FROM is an NVIDIA CUDA devel image (build args resolved);
- it installs the dependencies by running scripts/install-deps.sh, COPYed before that RUN;
- every package an apt-get/apt install in it names is in install-deps.sh's PACKAGES list (the
  build and run dependencies; the image carries no test-only package);
- every source path of COPY/ADD exists in the repository (globs must match something);
- every top-level folder the CMakeLists.txt reads (kernels/*.cu, cmake/x.cmake, web/...) is
  COPYed before the RUN that calls cmake, or the image's build breaks;
- every -DNAME=... given to cmake is an option()/CACHE variable of the project's
  CMakeLists.txt files, or a variable CMake itself documents (cmake --help-variable-list).

usage: check_dockerfile.py SRCDIR            check SRCDIR/Dockerfile
       check_dockerfile.py SRCDIR --selftest  the checker must reject broken Dockerfiles
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile


def logical_lines(text):
    """Dockerfile instructions with line continuations joined and comments dropped."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    if cur:
        out.append(cur)
    return out


def install_deps_packages(path):
    """The PACKAGES=( ... ) array of install-deps.sh, comments stripped."""
    text = open(path).read()
    m = re.search(r"^PACKAGES=\((.*?)^\)", text, re.S | re.M)
    if not m:
        raise SystemExit(f"FAIL: {path}: no PACKAGES=( ... ) list")
    names = set()
    for line in m.group(1).splitlines():
        names.update(line.split("#", 1)[0].split())
    return names


def cmake_cache_variables(src):
    """option(NAME ...) and set(NAME ... CACHE ...) across the project's CMake files."""
    names = set()
    files = [os.path.join(src, "CMakeLists.txt")] + glob.glob(os.path.join(src, "**", "*.cmake"), recursive=True)
    files += glob.glob(os.path.join(src, "*", "**", "CMakeLists.txt"), recursive=True)
    for f in files:
        first = os.path.relpath(f, src).split(os.sep)[0]
        if first.startswith("build") or first in ("node_modules", "runs"):
            continue  # build trees hold CMake's own and dependencies' files
        text = re.sub(r"#[^\n]*", "", open(f).read())
        names.update(re.findall(r"\boption\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)", text, re.I))
        for m in re.finditer(r"\bset\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)([^)]*)\)", text, re.I):
            if re.search(r"\bCACHE\b", m.group(2)):
                names.add(m.group(1))
    return names


def cmake_documented_variable(name, _cache={}):
    if "list" not in _cache:
        out = subprocess.run(["cmake", "--help-variable-list"], capture_output=True, text=True, check=True).stdout
        _cache["list"] = out.split()
    for v in _cache["list"]:
        # Templates such as CMAKE_<LANG>_FLAGS match any language.
        if re.fullmatch(re.sub(r"<[^>]+>", "[A-Za-z0-9_]+", re.escape(v)), name):
            return True
    return False


def cmake_source_folders(src):
    """Top-level folders of the repository that CMakeLists.txt names (dir/... paths)."""
    text = re.sub(r"#[^\n]*", "", open(os.path.join(src, "CMakeLists.txt")).read())
    folders = set()
    for d in os.listdir(src):
        if d.startswith((".", "build")) or not os.path.isdir(os.path.join(src, d)):
            continue
        if re.search(r"(?<![\w./-])(\$\{CMAKE_SOURCE_DIR\}/)?" + re.escape(d) + r"/", text):
            folders.add(d)
    return folders


def check(src, dockerfile):
    problems = []
    lines = logical_lines(open(dockerfile).read())
    args = {}
    packages = install_deps_packages(os.path.join(src, "scripts", "install-deps.sh"))
    cache_vars = cmake_cache_variables(src)
    copied = []
    ran_install_deps = False
    base = None
    for line in lines:
        instr, _, rest = line.partition(" ")
        instr = instr.upper()
        rest = rest.strip()
        if instr == "ARG":
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip()
        elif instr == "FROM" and base is None:
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), rest.split()[0])
        elif instr in ("COPY", "ADD"):
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            if any(p.startswith("--from") for p in shlex.split(rest)):
                continue
            for p in parts[:-1]:
                if not glob.glob(os.path.join(src, p)):
                    problems.append(f"{instr} {p}: no such path in the repository")
                copied.append(os.path.normpath(p))
        elif instr == "RUN":
            for cmd in re.split(r"&&|;|\|\|", rest):
                words = shlex.split(cmd)
                if not words:
                    continue
                if "install-deps.sh" in " ".join(words):
                    script = next(w for w in words if w.endswith("install-deps.sh"))
                    if not any(c in (os.path.normpath(script), "scripts", ".") for c in copied):
                        problems.append(f"RUN {script}: the script is not COPYed before it runs")
                    ran_install_deps = True
                if words[0] in ("apt-get", "apt") and "install" in words:
                    for w in words[words.index("install") + 1:]:
                        if not w.startswith("-") and w not in packages:
                            problems.append(f"apt install {w}: not in scripts/install-deps.sh's PACKAGES")
                if words[0] == "cmake" and "." not in copied:
                    for d in sorted(cmake_source_folders(src) - set(copied)):
                        problems.append(f"RUN cmake: CMakeLists.txt reads {d}/, which is not COPYed before it")
                if words[0] == "cmake":
                    for w in words:
                        m = re.fullmatch(r"-D([A-Za-z_][A-Za-z0-9_]*)(:[A-Z]+)?=.*", w)
                        if w.startswith("-D") and not m:
                            problems.append(f"cmake {w}: not of the form -DNAME=VALUE")
                        elif m and m.group(1) not in cache_vars and not cmake_documented_variable(m.group(1)):
                            problems.append(f"cmake -D{m.group(1)}: neither an option/CACHE variable of CMakeLists.txt nor a CMake variable")
    if not base or not re.fullmatch(r"nvidia/cuda:[0-9.]+-(cudnn[0-9]*-)?devel-\S+", base):
        problems.append(f"FROM {base}: expected an NVIDIA CUDA devel image (nvidia/cuda:X.Y.Z-devel-...)")
    if not ran_install_deps:
        problems.append("no RUN of scripts/install-deps.sh: the image's packages would drift from it")
    return list(dict.fromkeys(problems))  # a RUN with two cmake calls reports once


def selftest(src):
    good = open(os.path.join(src, "Dockerfile")).read()
    broken = {
        "unknown package": good + "RUN apt-get install -y --no-install-recommends libnot-a-dependency-dev\n",
        "missing COPY path": good + "COPY no/such/dir /x\n",
        "build folder not copied": re.sub(r"(?m)^COPY kernels kernels\n", "", good),
        "bogus CMake option": good.replace("-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_BUILD_TYPE=Release -DLLMRUN_NO_SUCH_OPTION=ON"),
        "bogus CMake variable": good.replace("-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_BUILD_TYPO=Release"),
        "not a CUDA devel image": re.sub(r"(?m)^ARG CUDA_IMAGE=.*$", "ARG CUDA_IMAGE=debian:bookworm", good),
        "no install-deps.sh": re.sub(r"(?m)^RUN bash scripts/install-deps.sh.*$", "RUN true", good),
    }
    failures = 0
    for what, text in broken.items():
        if text == good:
            print(f"FAIL: selftest '{what}': the mutation did not apply to the Dockerfile")
            failures += 1
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile", delete=False) as f:
            f.write(text)
        try:
            if not check(src, f.name):
                print(f"FAIL: selftest: a Dockerfile with a {what} passed the check")
                failures += 1
        finally:
            os.unlink(f.name)
    return failures


def main():
    src = os.path.abspath(sys.argv[1])
    if len(sys.argv) > 2 and sys.argv[2] == "--selftest":
        failures = selftest(src)
        print("dockerfile check selftest:", "OK" if not failures else f"{failures} failures")
        return 1 if failures else 0
    problems = check(src, os.path.join(src, "Dockerfile"))
    for p in problems:
        print("FAIL: Dockerfile:", p)
    if not problems:
        print("Dockerfile: OK (packages from scripts/install-deps.sh, paths exist, CMake options real)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
