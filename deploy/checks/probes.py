"""Health checks and probes: what each is (liveness- or readiness-type, its
command, its timeout), and that it dials the ports the config serves.
"""

import os
import re

from .common import is_loopback, split_host_port
from .flags import flag_value


class Probe:
    def __init__(self, where, kind, argv, timeout):
        self.where, self.kind, self.argv, self.timeout = where, kind, argv, timeout

    def script(self):
        return " ".join(self.argv)


def check_probe_targets(report, where, probe, config, member_id, lines):
    """A ruok probe must dial the config's client port, a zkctl admin probe
    its admin port."""
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
