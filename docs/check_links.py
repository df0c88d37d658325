#!/usr/bin/env python3
"""Checks the relative links of the book (docs/src/**/*.md) and of README.md.

For every relative link, image and reference definition outside code:
  - the file it names must exist;
  - its #anchor, when it points into a Markdown file, must be the id of a
    heading there, made as mdBook makes them: the heading's text, lower case,
    whitespace to '-', everything but letters, digits, '-' and '_' dropped,
    and '-1', '-2', ... added to repeats;
  - from a chapter of the book it must stay inside docs/src, where mdBook
    can follow it (a link to ../../src/... works on GitHub, not in the book).
Every chapter under docs/src must also be listed in SUMMARY.md, or mdBook does
not render it. External links (http:, mailto:, ...) are not fetched.

Prints each problem as FILE:LINE: what, and exits 1 if there is any.
Standard library only: python3 docs/check_links.py
"""

import html
import re
import sys
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "docs" / "src"

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
LIST_ITEM = re.compile(r"^ {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
INLINE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REF_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\[[^\]]*\]")
REF_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ATTR = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""")
HTML_ID = re.compile(r"""\b(?:id|name)\s*=\s*["']([^"']+)["']""")
HTML_TAG = re.compile(r"<[^>]+>")
CUSTOM_ID = re.compile(r"[ \t]*\{#([^\s}]+)[^}]*\}[ \t]*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def smart_punctuation() -> bool:
    """mdBook 0.5 turns `--` into an en dash in headings unless told not to."""
    toml = ROOT / "docs" / "book.toml"
    text = toml.read_text(encoding="utf-8") if toml.exists() else ""
    return not re.search(r"^\s*smart-punctuation\s*=\s*false", text, re.M)


SMART = smart_punctuation()


def prose_lines(text):
    """(line number, line) for each line outside fenced and indented code."""
    fence = None  # the opening fence of the code block we are in
    indented_code = False
    previous_blank = True
    in_list = False
    for number, line in enumerate(text.split("\n"), 1):
        blank = not line.strip()
        indented = line.startswith("    ") or line.startswith("\t")
        if fence:
            stripped = line.strip()
            if stripped.startswith(fence) and set(stripped) == {fence[0]}:
                fence = None
            continue
        if indented_code:
            if blank or indented:
                continue
            indented_code = False
        opening = FENCE.match(line)
        if opening:
            fence = opening.group(1)
            continue
        if indented and not blank and previous_blank and not in_list:
            indented_code = True
            continue
        if not blank:
            if LIST_ITEM.match(line):
                in_list = True
            elif not line.startswith((" ", "\t")):
                in_list = False
        previous_blank = blank
        yield number, line


def without_code_spans(line):
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def heading_text(raw):
    """The text mdBook renders for a heading's Markdown."""
    parts = []
    last = 0
    for m in CODE_SPAN.finditer(raw):
        parts.append(("prose", raw[last:m.start()]))
        parts.append(("code", m.group(2).strip() if m.group(2).strip() else m.group(2)))
        last = m.end()
    parts.append(("prose", raw[last:]))
    out = []
    for kind, piece in parts:
        if kind == "prose":
            piece = INLINE_LINK.sub(lambda m: m.group(1), piece)
            piece = REF_LINK.sub(lambda m: m.group(1), piece)
            piece = HTML_TAG.sub("", piece)
            piece = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", piece)
            piece = piece.replace("*", "")
            piece = re.sub(r"(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])", "", piece)
            piece = html.unescape(piece)
            if SMART:
                piece = piece.replace("---", "\u2014").replace("--", "\u2013")
        out.append(piece)
    return "".join(out)


def slug(text):
    out = []
    for ch in text.strip().lower():
        if ch.isalnum() or ch in "-_":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


_anchors = {}


def anchors(path):
    """Every id a Markdown file's headings (and raw HTML ids) get."""
    if path in _anchors:
        return _anchors[path]
    text = path.read_text(encoding="utf-8")
    ids, used = set(), set()
    previous = None
    for _, line in prose_lines(text):
        raw = None
        atx = ATX.match(line)
        if atx:
            raw = atx.group(2) or ""
        elif previous and SETEXT.match(line) and previous.strip() and "|" not in previous \
                and not ATX.match(previous) and not LIST_ITEM.match(previous):
            raw = previous.strip()
        for found in HTML_ID.findall(line):
            ids.add(found)
        previous = line
        if raw is None:
            continue
        custom = CUSTOM_ID.search(raw)
        if custom:
            ids.add(custom.group(1))
            continue
        base = slug(heading_text(raw))
        candidate, n = base, 0
        while candidate in used:
            n += 1
            candidate = f"{base}-{n}"
        used.add(candidate)
        ids.add(candidate)
    _anchors[path] = ids
    return ids


def links(text):
    """(line number, target) for every link, image, definition and HTML href/src outside code."""
    for number, line in prose_lines(text):
        definition = REF_DEF.match(line)
        if definition:
            yield number, definition.group(2)
            continue
        prose = without_code_spans(line)
        for m in INLINE_LINK.finditer(prose):
            yield number, m.group(2)
        for m in HTML_ATTR.finditer(prose):
            yield number, m.group(1)


def check(path, problems):
    text = path.read_text(encoding="utf-8")
    in_book = BOOK in path.parents
    count = 0
    for number, target in links(text):
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue
        count += 1
        where = f"{path.relative_to(ROOT)}:{number}"
        file_part, _, anchor = target.partition("#")
        file_part = unquote(file_part)
        if file_part.startswith("/"):
            problems.append(f"{where}: {target}: an absolute path; write it relative to this file")
            continue
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{where}: {target}: no such file ({dest.relative_to(ROOT) if ROOT in dest.parents else dest})")
            continue
        if in_book and BOOK not in dest.parents:
            problems.append(f"{where}: {target}: leaves docs/src, so the built book cannot follow it")
            continue
        if in_book and dest.is_dir():
            problems.append(f"{where}: {target}: a directory; link a chapter")
            continue
        if anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
            problems.append(f"{where}: {target}: no heading with id #{anchor} in {dest.relative_to(ROOT)}")
    return count


def check_summary(problems):
    summary = BOOK / "SUMMARY.md"
    if not summary.exists():
        problems.append("docs/src/SUMMARY.md: missing")
        return
    listed = set()
    for _, target in links(summary.read_text(encoding="utf-8")):
        if target and not SCHEME.match(target):
            listed.add((BOOK / unquote(target.partition("#")[0])).resolve())
    for chapter in sorted(BOOK.rglob("*.md")):
        if chapter != summary and chapter.resolve() not in listed:
            problems.append(f"{chapter.relative_to(ROOT)}: not listed in docs/src/SUMMARY.md, so mdBook does not render it")


def main():
    files = sorted(BOOK.rglob("*.md")) + [ROOT / "README.md"]
    problems = []
    total = sum(check(f, problems) for f in files if f.exists())
    check_summary(problems)
    if problems:
        print("\n".join(problems))
        print(f"check_links: {len(problems)} broken of {total} relative links in {len(files)} files", file=sys.stderr)
        return 1
    print(f"check_links: {total} relative links in {len(files)} files, all resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
