#!/usr/bin/env python3
"""No two modules of one folder import each other, directly or round a loop.

Cargo refuses a cycle between crates, but not between the modules of one
crate: `connection.rs` may take from `dial.rs` while `dial.rs` takes from
`connection.rs`, and such circles crept back into `src/` within days before
the workspace split (docs/src/internals/crates.md, "The cycles taken out").
This reads every crate of the workspace and its test binaries from their
roots, follows `mod` declarations (with `#[path]`) to learn which file is
which module, and collects the paths each file names (`use` trees, and
`crate::`, `super::` and `self::` paths in code). A path from module `a::b`
to `a::c::...` is an arrow `b -> c` among the children of `a`; a loop of such
arrows among one folder's children is a circle, reported with the names that
tie it. A module's own `mod.rs` (or `lib.rs`) is no child: naming its items
draws no arrow. Code under `#[cfg(test)]` is skipped, as tests are no layer.
The server's folders are also in layers (LAYERS): no arrow may run up them.

Usage: python3 integration-tests/import_circles.py [--self-test]
(IMPORT_CIRCLES_ROOT=DIR checks another checkout, such as an older commit's.)
"""

import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("IMPORT_CIRCLES_ROOT") or os.path.dirname(HERE)
# The core's purity check already strips Rust comments, strings and char literals.
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "crates", "core"))
from purity import strip  # noqa: E402


def crate_roots(root):
    """The crate roots to read: every package's lib.rs or main.rs, and the
    test binaries named in the root manifest."""
    roots = []
    for base in ["."] + [os.path.join("crates", d) for d in sorted(os.listdir(os.path.join(root, "crates")))]:
        for name in ("src/lib.rs", "src/main.rs"):
            path = os.path.join(root, base, name)
            if os.path.exists(path):
                roots.append(os.path.normpath(path))
    manifest = open(os.path.join(root, "Cargo.toml"), encoding="utf-8").read()
    for block in re.split(r"^\[\[", manifest, flags=re.M)[1:]:
        if block.startswith("test]]"):
            m = re.search(r'^path\s*=\s*"([^"]+)"', block, re.M)
            if m:
                roots.append(os.path.normpath(os.path.join(root, m.group(1))))
    return roots


# A `#[path = "..."]` on a `mod name;` declaration (read from the raw text:
# the stripped code has its strings blanked).
PATH_ATTRIBUTE = re.compile(r'#\[\s*path\s*=\s*"([^"]+)"\s*\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;')


TOKEN = re.compile(r"#\s*\[|[A-Za-z_][A-Za-z0-9_]*|::|[{}();,*\[\]]|\S")


def tokens(code):
    """Identifiers, `::`, `#[` and single punctuation, in order."""
    return TOKEN.findall(code)


def use_paths(toks, start):
    """Parses the use tree at toks[start] (after `use`); returns the paths it
    names (lists of segments) and the index after its `;`."""
    paths = []

    def tree(i, prefix):
        path = list(prefix)
        while i < len(toks):
            t = toks[i]
            if t == "{":
                i += 1
                while toks[i] != "}":
                    i = tree(i, path)
                    if toks[i] == ",":
                        i += 1
                return i + 1
            if t == "*":
                paths.append(path)
                return i + 1
            if t == "::":
                i += 1
                continue
            if t == "as":
                i += 2
                continue
            if t in (",", "}", ";"):
                if path:
                    paths.append(path[:-1] if path[-1] == "self" else path)
                return i
            path.append(t)
            i += 1
        return i

    i = tree(start, [])
    while i < len(toks) and toks[i] != ";":
        i += 1
    return paths, i + 1


def read_crate(root_file):
    """{file: (its module path, [the absolute paths it names])} for one crate."""
    files = {}
    todo = [(root_file, [], True)]
    while todo:
        path, module, owner = todo.pop()
        if path in files or not os.path.exists(path):
            continue
        source = open(path, encoding="utf-8").read()
        toks = tokens(strip(source))
        path_attributes = {name: value for value, name in PATH_ATTRIBUTE.findall(source)}
        children, refs = {}, []
        inline = []  # (name, brace depth where it opened)
        depth, i, attrs, skip_until = 0, 0, [], None
        while i < len(toks):
            t = toks[i]
            if t == "#[":
                j, level = i + 1, 1
                while j < len(toks) and level:
                    level += toks[j] == "[" or toks[j] == "#["
                    level -= toks[j] == "]"
                    j += 1
                attrs.append(" ".join(toks[i:j]))
                i = j
                continue
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
                if skip_until is not None and depth == skip_until:
                    skip_until = None
                while inline and inline[-1][1] == depth:
                    inline.pop()
            testing = any("cfg ( test )" in a for a in attrs)
            if t == "mod" and i + 2 < len(toks) and re.match(r"\w+$", toks[i + 1]):
                name, after = toks[i + 1], toks[i + 2]
                if after == ";" and skip_until is None and not inline and not testing:
                    given = path_attributes.get(name)
                    here = os.path.dirname(path)
                    if given:
                        # A file a path names owns its folder, as a mod.rs does.
                        child, child_owner = os.path.normpath(os.path.join(here, given)), True
                    else:
                        base = here if owner else os.path.join(here, os.path.splitext(os.path.basename(path))[0])
                        flat, nested = os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")
                        child, child_owner = (flat, False) if os.path.exists(flat) else (nested, True)
                    children[name] = child
                    todo.append((child, module + [name], child_owner))
                elif after == "{":
                    if testing and skip_until is None:
                        skip_until = depth
                    inline.append((name, depth))
                    depth += 1
                    i += 3
                    attrs = []
                    continue
            if t in (";", "{", "}"):
                attrs = []
            if skip_until is not None:
                i += 1
                continue
            here_module = module + [name for name, _ in inline]
            if t == "use":
                named, i = use_paths(toks, i + 1)
                refs.extend(resolve(p, here_module, children) for p in named)
                continue
            if t in ("crate", "super", "self") and i + 1 < len(toks) and toks[i + 1] == "::" and (i == 0 or toks[i - 1] != "::"):
                j, p = i, []
                while j < len(toks) and re.match(r"\w+$", toks[j]):
                    p.append(toks[j])
                    if j + 1 < len(toks) and toks[j + 1] == "::":
                        j += 2
                    else:
                        break
                refs.append(resolve(p, here_module, children))
                i = j + 1
                continue
            i += 1
        files[path] = (module, [r for r in refs if r])
    return files


def resolve(p, module, children):
    """An absolute path for `p` named in `module` (None: another crate)."""
    if not p:
        return None
    if p[0] == "crate":
        return p[1:]
    if p[0] in ("super", "self"):
        at = list(module)
        k = 0
        while k < len(p) and p[k] in ("super", "self"):
            if p[k] == "super":
                at = at[:-1]
            k += 1
        return at + p[k:]
    if p[0] in children:
        return list(module) + p
    return None


def arrows_of(files):
    """{(folder, a, b): names}: each arrow a -> b among one folder's children."""
    modules = {tuple(m) for m, _ in files.values()}
    arrows = {}
    for module, refs in files.values():
        for ref in refs:
            target = list(ref)
            names = []
            while target and tuple(target) not in modules:
                names.insert(0, target.pop())
            k = 0
            while k < min(len(module), len(target)) and module[k] == target[k]:
                k += 1
            if k < len(module) and k < len(target):
                key = (tuple(module[:k]), module[k], target[k])
                arrows.setdefault(key, set()).add("::".join(target[k + 1:] + names[:1]) or target[k])
    return arrows


# The server's folders in layers, bottom first: an arrow may run down or
# within a layer, never up (docs/src/internals/crates.md). A folder added
# to src/ must be given its place here.
LAYERS = {
    "src/lib.rs": [["telemetry", "security"], ["runtime"], ["peer", "ports"], ["ops"], ["serve"], ["testing"]],
}


def arrows_up(crate, files, root):
    """Report lines for every arrow that runs up the crate root's layers."""
    layers = LAYERS.get(os.path.relpath(crate, root))
    if layers is None:
        return []
    level = {name: i for i, layer in enumerate(layers) for name in layer}
    lines = []
    for (folder, a, b), names in sorted(arrows_of(files).items()):
        if folder:
            continue
        for m in (a, b):
            if m not in level:
                lines.append(f"{os.path.relpath(crate, root)}: module {m} has no layer (LAYERS in import_circles.py)")
        if a in level and b in level and level[a] < level[b]:
            lines.append(f"{os.path.relpath(crate, root)}: {a} imports {b}, a layer above it: {', '.join(sorted(names)[:6])}")
    return sorted(set(lines))


def circles(files):
    """[(folder, [children round the loop], {(a, b): names})]."""
    arrows = arrows_of(files)
    found = []
    folders = {f for f, _, _ in arrows}
    for folder in sorted(folders):
        graph = {}
        for (f, a, b), names in arrows.items():
            if f == folder:
                graph.setdefault(a, set()).add(b)
        for component in strongly_connected(graph):
            if len(component) > 1:
                ties = {(a, b): sorted(arrows[(folder, a, b)]) for a in component for b in graph.get(a, ())
                        if b in component}
                found.append((folder, sorted(component), ties))
    return found


def strongly_connected(graph):
    """Tarjan's components of `graph` ({node: {node}})."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = set(graph) | {b for bs in graph.values() for b in bs}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(component)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def check(root):
    """The circles of every crate under `root`, as report lines."""
    lines = []
    for crate in crate_roots(root):
        files = read_crate(crate)
        lines.extend(arrows_up(crate, files, root))
        for folder, members, ties in circles(files):
            where = os.path.relpath(os.path.dirname(crate), root)
            lines.append(f"{where}: circle among {'::'.join(folder) or 'the crate root'}'s modules {', '.join(members)}")
            for (a, b), names in sorted(ties.items()):
                lines.append(f"  {a} -> {b}: {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}")
    return lines


def self_test():
    """Plants a circle in a copy of the client crate and fails unless it is found."""
    work = tempfile.mkdtemp()
    try:
        for part in ("Cargo.toml", "src", "crates", "integration-tests"):
            source = os.path.join(ROOT, part)
            target = os.path.join(work, part)
            if os.path.isdir(source):
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("target", "*.png", "node_modules"))
            else:
                shutil.copy(source, target)
        if check(work):
            print("self-test: the unchanged copy already has circles; fix those first")
            return 1
        settings = os.path.join(work, "crates/client/src/settings.rs")
        with open(settings, "a", encoding="utf-8") as f:
            f.write("\n/// Planted.\npub(crate) type Planted = super::dial::Link;\n")
        found = check(work)
        if not any("settings" in line and "dial" in line for line in found):
            print("self-test: a planted circle (dial -> settings -> dial) was not found")
            return 1
        print("self-test: a planted circle is found: " + found[0])
        stats = os.path.join(work, "src/telemetry/stats.rs")
        with open(stats, "a", encoding="utf-8") as f:
            f.write("\n/// Planted.\npub(crate) type PlantedUp = crate::runtime::handle::Handle;\n")
        found = check(work)
        if not any("telemetry imports runtime" in line for line in found):
            print("self-test: a planted arrow up (telemetry -> runtime) was not found")
            return 1
        print("self-test: a planted arrow up is found: " + next(l for l in found if "imports" in l))
        return 0
    finally:
        shutil.rmtree(work)


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    lines = check(ROOT)
    for line in lines:
        print(line)
    crates = len(crate_roots(ROOT))
    if lines:
        print(f"import_circles: {sum(1 for l in lines if not l.startswith('  '))} circle(s) or arrows up in {crates} crate roots")
        return 1
    print(f"import_circles: no module imports itself round a loop, and no arrow runs up the server's layers, in {crates} crate roots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
