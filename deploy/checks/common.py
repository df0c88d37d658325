"""What every check shares: where the repository is, the report the checks
print to, and small helpers for addresses, environments and durations.

Kept free of third-party imports: it is loaded before ensure_dependencies has
had a chance to install them.
"""

import fcntl
import ipaddress
import os
import re
import socket
import struct
import sys
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent.parent
REPO = DEPLOY.parent
# The entry point, which re-runs itself (in the venv, as the probe worker).
SCRIPT = DEPLOY / "check.py"

# What each kind of check must do with a member that runs but has no quorum.
# Liveness-type checks restart or flag a member: they must pass then, or a
# member waiting for its peers is killed. Readiness-type ones route clients.
LIVENESS, READINESS = "liveness", "readiness"


# ---------------------------------------------------------------- reporting


class Report:
    def __init__(self):
        self.passed = 0
        self.failed = []
        self.skipped = 0

    def ok(self, what):
        self.passed += 1
        print(f"ok    {what}", flush=True)

    def fail(self, what):
        self.failed.append(what)
        print(f"FAIL  {what}", flush=True)

    def skip(self, what):
        self.skipped += 1
        print(f"skip  {what}", flush=True)

    def check(self, condition, ok, fail):
        if condition:
            self.ok(ok)
        else:
            self.fail(fail)
        return condition

    def section(self, title):
        print(f"\n== {title}", flush=True)


def rel(path):
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------- helpers


def toml_loads(text):
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    return tomllib.loads(text)


def clean_env(extra=None):
    """The environment without ZABKEEPER_*/ZKCTL_* variables, which the
    binaries would read as flags or config keys, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZABKEEPER_", "ZKCTL_"))}
    env.update(extra or {})
    return env


def config_env(env, besides=("ZABKEEPER_ID", "ZABKEEPER_CONFIG")):
    """The ZABKEEPER_* variables of a deployment's environment that reach the
    config (all but `besides`), for running the binary on that config."""
    return {k: v for k, v in env.items() if k.startswith("ZABKEEPER_") and k not in besides}


def split_host_port(value):
    if value.startswith("["):
        host, _, port = value[1:].partition("]:")
    else:
        host, _, port = value.rpartition(":")
    return host, int(port) if port.isdigit() else None


def is_ip(host):
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def is_loopback(host):
    return host.lower() == "localhost" or (is_ip(host) and ipaddress.ip_address(host).is_loopback)


def server_message(stderr):
    """The server's last error line, without serde's list of every key."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    message = lines[-1] if lines else "(no message)"
    return re.sub(r", expected one of .*", "", message)


def duration_seconds(text, default):
    if text is None:
        return default
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", str(text))
    if not m or not any(m.groups()):
        return default
    return int(m.group(1) or 0) * 60 + float(m.group(2) or 0)


def loopback_up():
    """Brings up loopback, which is down in a new network namespace, with no
    dependency on iproute2."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ifreq = struct.pack("16sH14s", b"lo", 0, b"\0" * 14)
    flags = struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, ifreq))[1]  # SIOCGIFFLAGS
    fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 1, b"\0" * 14))  # SIOCSIFFLAGS, IFF_UP
    s.close()
