#!/usr/bin/env python3
"""The core's purity, beyond what its manifest already guarantees.

The manifest keeps tokio, tonic, sled and rand out of zabkeeper-core: code
that names them does not compile. What a manifest cannot see, this checks:

1. Nothing impure is reachable through a dependency either: `cargo tree` of
   the core has none of the crates that do I/O, run tasks or draw ambient
   randomness (tokio, mio, tonic, hyper, sled, getrandom, rand).
2. The core's own code reads no ambient input: no wall clock
   (`SystemTime`, `Instant::now`), no environment (`std::env`), no files,
   sockets, threads or processes, no std `HashMap`/`HashSet` (their
   `RandomState` seeds differ per process, so iteration order would differ
   between replicas and between runs of one seed; the core uses BTreeMap or
   rustc-hash's deterministic `FxHashMap`).

Comments, doc comments and string literals are not code and are skipped;
`#[cfg(test)]` modules count (a test that reads the clock is as flaky as
the code). `--self-test` plants a violation of each kind in a copy of the
sources and fails unless every one is caught.

Usage: python3 crates/core/purity.py [--self-test]
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FORBIDDEN_CRATES = {"tokio", "mio", "tonic", "hyper", "sled", "getrandom", "rand", "socket2"}
# (pattern, why) over code with comments and strings removed.
FORBIDDEN_CODE = [
    (r"\bSystemTime\b", "reads the wall clock"),
    (r"\bInstant\s*::\s*now\b", "reads the clock"),
    (r"\bstd\s*::\s*env\b", "reads the environment"),
    (r"\bstd\s*::\s*fs\b", "touches files"),
    (r"\b(?:TcpStream|TcpListener|UdpSocket|ToSocketAddrs)\b", "opens sockets or resolves names"),
    (r"\bstd\s*::\s*thread\b", "starts threads or sleeps"),
    (r"\bstd\s*::\s*process\b", "runs processes"),
    (r"\bRandomState\b", "seeds hashing at random"),
    (r"\b(?:std\s*::\s*collections\s*::\s*)?Hash(?:Map|Set)\b", "iterates in a per-process random order"),
    (r"\bthread_rng\b|\brand\s*::", "draws ambient randomness"),
]


def strip(source):
    """The code of a Rust file without comments, string and char literals
    (kept as blanks, so line numbers stay)."""
    out = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            i = n if j < 0 else j
        elif source.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if source.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif source.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * source.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', source[i:i + 20]) and (i == 0 or not (source[i - 1].isalnum() or source[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', source[i:]).group(1)
            end = source.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * source.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and source[j] != '"':
                j += 2 if source[j] == "\\" else 1
            out.append('""' + "\n" * source.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", source[i:i + 4]):
            # A char literal (a lifetime has no closing quote).
            j = source.find("'", i + 1 + (2 if source[i + 1] == "\\" else 1))
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def scan_sources(src_dir):
    """Each forbidden use in the Rust files under `src_dir`: (file, line, text, why)."""
    found = []
    for root, _dirs, files in os.walk(src_dir):
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                original = f.read()
            code = strip(original).split("\n")
            lines = original.split("\n")
            for number, line in enumerate(code, 1):
                for pattern, why in FORBIDDEN_CODE:
                    if re.search(pattern, line):
                        found.append((path, number, lines[number - 1].strip(), why))
    return found


def scan_dependencies(manifest_dir):
    """Forbidden crates anywhere in the core's normal dependency tree."""
    out = subprocess.run(["cargo", "tree", "-e", "normal", "--prefix", "none", "--manifest-path",
                          os.path.join(manifest_dir, "Cargo.toml")], capture_output=True, text=True, check=True)
    names = {line.split()[0] for line in out.stdout.splitlines() if line.strip()}
    return sorted(names & FORBIDDEN_CRATES)


def check(core_dir, dependencies=True):
    src = os.path.join(core_dir, "src")
    problems = [f"{os.path.relpath(path, core_dir)}:{line}: {text}  ({why})" for path, line, text, why in scan_sources(src)]
    if dependencies:
        problems += [f"the core depends, directly or not, on {name}" for name in scan_dependencies(core_dir)]
    return problems


PLANTS = [
    ("let now = std::time::SystemTime::now();", "reads the wall clock"),
    ("let t = std::time::Instant::now();", "reads the clock"),
    ('let v = std::env::var("X");', "reads the environment"),
    ("let m: std::collections::HashMap<u8, u8> = Default::default();", "iterates in a per-process random order"),
    ("let s = HashSet::<u8>::new();", "iterates in a per-process random order"),
    ("std::thread::sleep(d);", "starts threads or sleeps"),
    ('let f = std::fs::read("x");', "touches files"),
    ('let c = std::net::TcpStream::connect("127.0.0.1:1");', "opens sockets"),
]
NOT_PLANTS = [
    "// a comment naming std::time::SystemTime::now() is not code",
    "/// nor a doc comment naming HashMap",
    'let s = "nor a string with std::env::var";',
    "let m: rustc_hash::FxHashMap<u8, u8> = Default::default();",
    "let ip: std::net::IpAddr = [127, 0, 0, 1].into();",
]


def self_test():
    """Plants each violation (and each harmless look-alike) in a copy of
    the core's sources; every violation must be caught, nothing else."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "core")
        shutil.copytree(os.path.join(HERE, "src"), os.path.join(copy, "src"))
        clean = check(copy, dependencies=False)
        if clean:
            return [f"the sources are not clean to start with: {clean}"]
        failures = []
        target = os.path.join(copy, "src", "ids.rs")
        with open(target, encoding="utf-8") as f:
            original = f.read()
        for plant, why in PLANTS:
            with open(target, "w", encoding="utf-8") as f:
                f.write(original + f"\nfn planted(d: std::time::Duration) {{ {plant} }}\n")
            found = [p for p in check(copy, dependencies=False) if why in p]
            if not found:
                failures.append(f"missed a planted violation: {plant}")
        for harmless in NOT_PLANTS:
            with open(target, "w", encoding="utf-8") as f:
                f.write(original + f"\nfn planted() {{\n    {harmless}\n}}\n")
            found = check(copy, dependencies=False)
            if found:
                failures.append(f"flagged harmless code {harmless!r}: {found}")
        return failures


def main():
    if "--self-test" in sys.argv[1:]:
        failures = self_test()
        for failure in failures:
            print(f"check-purity self-test: {failure}")
        if failures:
            return 1
        print(f"check-purity self-test: ok ({len(PLANTS)} planted violations caught, {len(NOT_PLANTS)} look-alikes passed)")
        return 0
    problems = check(HERE)
    if problems:
        print("purity violations in zabkeeper-core:")
        for problem in problems:
            print(f"  {problem}")
        return 1
    print("check-purity: ok (no impure dependency, no clock, environment, I/O, threads or random-order hashing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
