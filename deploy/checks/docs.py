"""The configuration reference (docs/src/configuration.md) against the keys
crates/config accepts: every key documented, nothing documented that the server
would refuse. Rows of its tables start with the key alone in backticks."""

import re

from .common import REPO

REFERENCE = REPO / "docs" / "src" / "configuration.md"


def documented_keys(text):
    """{section heading: {key}} of the reference's table rows."""
    sections, heading = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
        m = re.match(r"^\|\s*`([a-z_][a-z0-9_]*)`\s*\|", line)
        if m and heading:
            sections.setdefault(heading, set()).add(m.group(1))
    return sections


def check_config_reference(report, keys):
    """Each of the top-level, [[server]] and [tls] keys of `keys` (from
    crates/config) has a row in its section of the reference, and no row names
    a key the server does not take."""
    if not REFERENCE.is_file():
        report.fail(f"{REFERENCE.relative_to(REPO)} is missing")
        return
    sections = documented_keys(REFERENCE.read_text())
    # The top level also names the tables: `server` ([[server]]) and `tls`.
    for title, code in (("Top-level keys", keys.top | {"server"}), ("`[[server]]` keys", keys.member),
                        ("`[tls]` keys", keys.tls)):
        documented = sections.get(title, set())
        missing, unknown = sorted(code - documented), sorted(documented - code)
        report.check(not missing and not unknown,
                     f"docs: the {title} section documents exactly the {len(code)} keys crates/config takes",
                     f"docs: the {title} section of {REFERENCE.relative_to(REPO)}: "
                     + "; ".join(filter(None, [missing and f"undocumented: {', '.join(missing)}",
                                               unknown and f"not keys of crates/config: {', '.join(unknown)}"])))
