"""Health checks and probes: what each is (liveness- or readiness-type, its
command, its timeout), and that it dials the ports the config serves.
"""

import os
import re
import sys

from .common import LIVENESS, READINESS, is_loopback, split_host_port
from .flags import flag_value


# The member's HTTP listener (metrics_addr) answers probes on these paths:
# /livez while the process serves, /readyz while it is in a quorum and serving.
HTTP_PATHS = {LIVENESS: "/livez", READINESS: "/readyz"}

# What the kubelet does for an httpGet probe: a GET, passing on 200-399.
HTTP_GET = (
    "import sys, urllib.request, urllib.error\n"
    "try:\n"
    "    status = urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).status\n"
    "except urllib.error.HTTPError as e:\n"
    "    status = e.code\n"
    "except OSError as e:\n"
    "    sys.exit(f'{sys.argv[1]}: {e}')\n"
    "sys.exit(0 if 200 <= status < 400 else f'{sys.argv[1]}: HTTP {status}')\n"
)


class Probe:
    def __init__(self, where, kind, argv, timeout, http=None):
        self.where, self.kind, self.argv, self.timeout = where, kind, argv, timeout
        # (port, path, scheme) of an httpGet probe, whose argv does the same GET.
        self.http = http

    def script(self):
        return " ".join(self.argv)


def http_probe(where, kind, port, path, timeout, scheme="HTTP"):
    """An httpGet probe, run (by the live checks) as a GET of the pod's port on loopback."""
    url = f"{scheme.lower()}://127.0.0.1:{port}{path}"
    return Probe(where, kind, [sys.executable, "-c", HTTP_GET, url, str(timeout)], timeout, http=(port, path, scheme))


def check_probe_targets(report, where, probe, config, member_id, lines):
    """A ruok probe must dial the config's client port, a zkctl admin probe
    its admin port, an httpGet probe the metrics port, on the path its kind
    needs (/livez for startup and liveness, /readyz for readiness)."""
    if probe.http:
        port, path, scheme = probe.http
        want = config.port(member_id, "metrics_addr") if config else None
        report.check(port == want and scheme == "HTTP",
                     f"{where}: GETs {path} on port {port}, the config's metrics_addr port (plain HTTP)",
                     f"{where}: GETs {scheme} port {port}, but the config's metrics_addr port is {want} (plain HTTP)")
        report.check(path == HTTP_PATHS[probe.kind],
                     f"{where}: {path} is the {probe.kind} endpoint",
                     f"{where}: a {probe.kind} probe on {path}; want {HTTP_PATHS[probe.kind]}")
        return
    script = probe.script()
    m = re.search(r"/dev/tcp/([^/\s]+)/(\d+)", script)
    if m:
        want = config.port(member_id, "client_addr") if config else None
        report.check(want == int(m.group(2)) and "ruok" in script,
                     f"{where}: sends ruok to port {m.group(2)}, the client port of the config",
                     f"{where}: dials port {m.group(2)}, but the config's client_addr port is {want}")
    for words, path, flags in lines.check(where, probe.argv):
        if os.path.basename(words[0]) == "zkctl" and path[:1] == ["admin"]:
            admin = flag_value(flags, "--admin") or "127.0.0.1:4181"
            want = config.port(member_id, "admin_addr") if config else None
            report.check(split_host_port(admin)[1] == want and is_loopback(split_host_port(admin)[0]),
                         f"{where}: asks the admin API at {admin}, the config's loopback admin port",
                         f"{where}: asks the admin API at {admin}, but the config's admin_addr port is {want}")
