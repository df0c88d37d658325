"""The systemd unit: its Exec* command lines and Environment, its hardening,
and the example config beside it, whose data directory it must let the
server write.
"""

import shlex
from pathlib import Path

from .common import DEPLOY, config_env, rel
from .flags import flag_value, server_invocation


def unit_directives(text):
    """(section, key, value) triples, continuation lines joined."""
    result, section, pending = [], None, ""
    for line in text.splitlines():
        line = pending + line.strip() if pending else line.strip()
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        result.append((section, key.strip(), value.strip()))
    return result


def check_systemd(report, lines, configs):
    path = DEPLOY / "systemd" / "zabkeeper.service"
    where = rel(path)
    directives = unit_directives(path.read_text())
    service = {}
    for section, key, value in directives:
        if section == "Service":
            service.setdefault(key, []).append(value)
    config_path = None
    for key in ("ExecStartPre", "ExecStart", "ExecStartPost", "ExecReload", "ExecStop", "ExecStopPost"):
        for value in service.get(key, []):
            argv = shlex.split(value.lstrip("-@:+!"))
            parsed = lines.check(f"{where} {key}", argv)
            flags = server_invocation(parsed)
            if flags and key == "ExecStart":
                config_path = flag_value(flags, "--config")
    environment = {}
    for value in service.get("Environment", []):
        for assignment in shlex.split(value):
            k, _, v = assignment.partition("=")
            environment[k] = v
    lines.check_env(where, sorted(environment), configs.keys)
    last = {k: v[-1] for k, v in service.items()}
    user = last.get("User", "")
    report.check(user and user not in ("root", "0") or last.get("DynamicUser") == "yes", f"{where}: runs as its own user {user}",
                 f"{where}: User= missing or root")
    for key, want in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("Restart", "on-failure")):
        report.check(last.get(key) == want, f"{where}: {key}={want}", f"{where}: {key}={last.get(key)}, want {want}")
    nofile = last.get("LimitNOFILE", "")
    report.check(nofile.isdigit() and int(nofile) >= 65536, f"{where}: LimitNOFILE={nofile}",
                 f"{where}: LimitNOFILE={nofile or '(unset)'}, want at least 65536")
    example = DEPLOY / "systemd" / Path(config_path or "zabkeeper.toml").name
    if not config_path or not example.exists():
        report.fail(f"{where}: ExecStart's --config {config_path} has no example beside the unit")
        return
    config = configs.check(rel(example), example.read_text(),
                           env=config_env(environment))
    if config:
        writable = " ".join(service.get("ReadWritePaths", [])).split()
        writable += [f"/var/lib/{d}" for d in " ".join(service.get("StateDirectory", [])).split()]
        writable = list(dict.fromkeys(writable))
        dirs = {(m.get("data_dir") or config.data.get("data_dir") or "").replace("{id}", str(i))
                for i, m in config.members.items()} - {""}
        unwritable = [d for d in dirs if not any(d == w or d.startswith(w.rstrip("/") + "/") for w in writable)]
        report.check(not unwritable, f"{where}: data_dir {', '.join(sorted(dirs))} is under ReadWritePaths {', '.join(writable)}",
                     f"{where}: data_dir {', '.join(unwritable)} is not writable under ProtectSystem=strict (ReadWritePaths: {writable})")
