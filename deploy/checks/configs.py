"""TOML configs: the keys crates/config's file structs accept, read from the
Rust source, and each embedded config checked against them, against the
deployment's conventions, and by the binary itself.
"""

import re
import subprocess
import tempfile
from collections import namedtuple
from pathlib import Path

from .common import REPO, clean_env, is_ip, is_loopback, rel, server_message, split_host_port, toml_loads

# Keys the interface adds; used only while crates/config does not have
# them yet (reported as such).
INTERFACE_TOP_KEYS = {"bind_host"}
INTERFACE_MEMBER_KEYS = {"peer_bind", "grpc_bind", "client_bind", "admin_bind", "metrics_bind"}
# The top-level key that holds FileTls; ZABKEEPER_TLS_<KEY> sets its keys
# (crates/config/src/overrides.rs).
TLS_TABLE = "tls"


class ConfigKeys(namedtuple("ConfigKeys", "top member required tls tls_required")):
    """What crates/config's file structs accept: the top-level keys (FileConfig's,
    `tls` among them, `server` not), the [[server]] keys (FileMember's) and
    the [tls] keys (FileTls's), with the ones a [[server]] and a [tls] must
    have."""


def config_keys(report):
    """The keys FileConfig, FileMember and FileTls accept, read from the
    source, and the keys a [[server]] and a [tls] must have."""
    sources = sorted((REPO / "crates" / "config" / "src").glob("*.rs"))
    texts = [(p, p.read_text()) for p in sources]
    found = {}  # struct -> the file that holds it

    def fields(struct):
        """{field: (its type, whether it may be left out)}"""
        for path, text in texts:
            m = re.search(r"struct\s+%s\s*\{(.*?)\n\}" % struct, text, re.S)
            if m:
                found[struct] = path
                break
        else:
            report.fail(f"crates/config: no `struct {struct}` found in {', '.join(rel(p) for p in sources)}")
            return {}
        body = re.sub(r"//[^\n]*", "", m.group(1))
        result = {}
        attrs = []
        for line in body.splitlines():
            line = line.strip()
            if line.startswith("#["):
                attrs.append(line)
                continue
            fm = re.match(r"^(?:pub(?:\([^)]*\))?\s+)?([a-z_][a-z0-9_]*)\s*:\s*(.+?),?$", line)
            if fm:
                if any("rename" in a for a in attrs):
                    report.fail(f"crates/config: {struct}.{fm.group(1)} is renamed by serde; check.py cannot follow that")
                optional = fm.group(2).startswith("Option<") or any("default" in a for a in attrs)
                result[fm.group(1)] = (fm.group(2), optional)
                attrs = []
        return result

    def required(fields):
        return {k for k, (_, optional) in fields.items() if not optional}

    top_fields, member_fields, tls_fields = fields("FileConfig"), fields("FileMember"), fields("FileTls")
    top = set(top_fields) - {"server"}
    member = set(member_fields)
    where = ", ".join(rel(p) for p in sources)
    report.ok(f"crates/config: {len(top)} top-level keys and {len(member)} [[server]] keys read from {where}")
    if tls_fields:
        # Where FileConfig holds FileTls: the table ZABKEEPER_TLS_<KEY> sets.
        holders = sorted(k for k, (kind, _) in top_fields.items() if re.search(r"\bFileTls\b", kind))
        report.check(holders == [TLS_TABLE], f"crates/config: {len(tls_fields)} [{TLS_TABLE}] keys read from {rel(found['FileTls'])}",
                     f"crates/config: FileConfig holds FileTls as {', '.join(holders) or 'no key'}, not as `{TLS_TABLE}`, "
                     f"the table check.py checks and ZABKEEPER_{TLS_TABLE.upper()}_<KEY> sets")
    for keys, interface, what in ((top, INTERFACE_TOP_KEYS, "top-level"), (member, INTERFACE_MEMBER_KEYS, "[[server]]")):
        pending = interface - keys
        if pending:
            report.skip(f"crates/config: {what} keys {', '.join(sorted(pending))} are not in the source yet; accepted as the planned interface")
            keys |= pending
    return ConfigKeys(top, member, required(member_fields), set(tls_fields), required(tls_fields))


class Config:
    def __init__(self, where, data):
        self.where = where
        self.data = data
        self.members = {m.get("id"): m for m in data.get("server", []) if isinstance(m, dict)}

    def port(self, member_id, key):
        value = self.members.get(member_id, {}).get(key)
        return split_host_port(value)[1] if isinstance(value, str) else None

    def ruok_enabled(self):
        words = self.data.get("four_letter_words", ["srvr", "ruok", "mntr"])
        return "ruok" in words or "*" in words


class Configs:
    """Checks TOML configs against crates/config and the binary."""

    def __init__(self, report, keys, binaries):
        self.report = report
        self.keys = keys
        self.binaries = binaries
        self.count = 0

    def check(self, where, text, members=None, host_pattern=None, env=None, needs_ruok=False):
        """`host_pattern(id)` gives a regex the host of every non-loopback
        address of member `id` must match."""
        report = self.report
        self.count += 1
        try:
            data = toml_loads(text)
        except Exception as e:  # tomllib.TOMLDecodeError, tomli's
            report.fail(f"{where}: not valid TOML: {e}")
            return None
        config = Config(where, data)
        problems, ids = self.problems(config, members, host_pattern, env, needs_ruok)
        if problems:
            for p in problems:
                report.fail(f"{where}: {p}")
        else:
            admin = "admin remote, with a token" if data.get("admin_allow_remote") else "admin on loopback"
            report.ok(f"{where}: {len(ids)} member(s), ids 1..{len(ids)}, keys known to crates/config, {admin}, no secrets"
                      + (", ruok enabled" if needs_ruok else ""))
        self.run_binary(where, text, ids, env)
        return config

    def problems(self, config, members=None, host_pattern=None, env=None, needs_ruok=False):
        """What is wrong with a parsed config, and its member ids."""
        data = config.data
        problems = []
        unknown = sorted(set(data) - self.keys.top - {"server"})
        if unknown:
            problems.append(f"unknown top-level keys {', '.join(unknown)}")
        if TLS_TABLE in data:
            problems += self.tls_problems(data[TLS_TABLE], env)
        servers = data.get("server", [])
        if not isinstance(servers, list) or not servers:
            problems.append("no [[server]] tables")
            servers = []
        ids = []
        for i, m in enumerate(servers):
            mid = m.get("id")
            ids.append(mid)
            bad = sorted(set(m) - self.keys.member)
            if bad:
                problems.append(f"server[{i}] (id {mid}): unknown keys {', '.join(bad)}")
            missing = sorted(self.keys.required - set(m))
            if missing:
                problems.append(f"server[{i}] (id {mid}): missing {', '.join(missing)}")
            for key, value in m.items():
                if not (key.endswith("_addr") or key.endswith("_bind")):
                    continue
                host, port = split_host_port(str(value))
                if port is None or not host:
                    problems.append(f"server[{i}].{key} = {value!r} is not host:port")
                    continue
                if key.endswith("_addr") and not is_ip(host) and not is_loopback(host):
                    first = host.split(".")[0]
                    ordinal = re.fullmatch(r".*-(\d+)", first)
                    if not ordinal or int(ordinal.group(1)) != (mid or 0) - 1:
                        problems.append(f"server[{i}].{key} = {value!r}: member {mid} must be host ...-{(mid or 0) - 1} (ordinal = id - 1, as a StatefulSet names pods)")
                    elif host_pattern and not re.fullmatch(host_pattern(mid), host):
                        problems.append(f"server[{i}].{key} = {value!r}: expected a host matching {host_pattern(mid)}")
            admin = m.get("admin_addr")
            if admin and not is_loopback(split_host_port(admin)[0]) and not data.get("admin_allow_remote"):
                problems.append(f"server[{i}].admin_addr = {admin!r} is not loopback (and admin_allow_remote is not set)")
            if "data_dir" not in m and "data_dir" not in data:
                problems.append(f"server[{i}] (id {mid}): no data_dir, and no top-level one")
        expected = list(range(1, len(ids) + 1))
        if sorted(i for i in ids if isinstance(i, int)) != expected or len(set(ids)) != len(ids):
            problems.append(f"member ids are {ids}, expected 1..{len(ids)}")
        if members is not None and len(ids) != members:
            problems.append(f"{len(ids)} members, but {members} are deployed")
        token_from = {"ZABKEEPER_ADMIN_TOKEN", "ZABKEEPER_ADMIN_TOKEN_FILE"} & set(env or {})
        if data.get("admin_allow_remote") and "admin_token_file" not in data and not token_from:
            problems.append("admin_allow_remote without a token (admin_token_file, ZABKEEPER_ADMIN_TOKEN): "
                            "the admin API would answer whoever reaches it")
        for secret in ("admin_token", "super_digest"):
            if secret in data:
                problems.append(f"{secret} is written in the file: secrets come from a mounted file or the environment, not the repository")
        if needs_ruok and not config.ruok_enabled():
            problems.append("four_letter_words lacks \"ruok\", which the health checks send")
        return problems, ids

    def tls_problems(self, tls, env):
        """[tls] holds only FileTls's keys, and those it must have unless the
        environment sets them (ZABKEEPER_TLS_<KEY>)."""
        table = f"[{TLS_TABLE}]"
        if not isinstance(tls, dict):
            return [f"{TLS_TABLE} = {tls!r} is not a {table} table"]
        problems = []
        unknown = sorted(set(tls) - self.keys.tls)
        if unknown:
            problems.append(f"{table}: unknown keys {', '.join(unknown)}")
        prefix = f"ZABKEEPER_{TLS_TABLE.upper()}_"
        from_env = {name[len(prefix):].lower() for name in env or {} if name.startswith(prefix)}
        missing = sorted(self.keys.tls_required - set(tls) - from_env)
        if missing:
            problems.append(f"{table}: missing {', '.join(missing)}")
        return problems

    def run_binary(self, where, text, ids, env):
        """The server's own verdict: it parses and validates the whole file,
        with the deployment's environment, for each member, and starts nothing."""
        with tempfile.TemporaryDirectory(prefix="deploy-check-") as tmp:
            path = Path(tmp) / "zabkeeper.toml"
            path.write_text(text)
            failures = {}
            for mid in ids:
                cmd = [str(self.binaries.paths["zabkeeper"]), "--config", str(path), "--id", str(mid), "--print-connect-strings"]
                out = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(env), timeout=30, cwd=tmp)
                if out.returncode != 0:
                    message = f"exit {out.returncode}: {server_message(out.stderr)}"
                    failures.setdefault(message.replace(str(path), "FILE"), []).append(mid)
            if failures:
                for message, failed_ids in failures.items():
                    self.report.fail(f"{where}: zabkeeper refuses it (--id {', '.join(map(str, failed_ids))}): {message}")
            else:
                shown = " with " + " ".join(sorted(env)) if env else ""
                self.report.ok(f"{where}: `zabkeeper --config F --id N --print-connect-strings` accepts it for ids {ids}{shown}")
