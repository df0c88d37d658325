"""Checks of the checks: the config check and the variable check run on a
small config with a [tls] table and on ZABKEEPER_TLS_<KEY> variables, with
the keys just read from crates/config, so that a check which stops seeing those
keys fails here instead of quietly passing (or refusing) every deployment.
"""

from .common import Report, toml_loads
from .configs import TLS_TABLE, Config, Configs
from .flags import CommandLines

# One member, valid for the config check; a [tls] table is added below it.
MEMBER = """
data_dir = "/data"
[[server]]
id = 1
peer_addr = "zk-0.zk-hs:2888"
grpc_addr = "zk-0.zk-hs:3181"
"""
UNKNOWN = "no_such_key"


class Verdicts(Report):
    """A report that keeps its verdicts instead of printing them."""

    def __init__(self):
        super().__init__()
        self.verdicts = []

    def ok(self, what):
        self.verdicts.append(("ok", what))

    def fail(self, what):
        self.verdicts.append(("fail", what))

    def skip(self, what):
        self.verdicts.append(("skip", what))


def check_the_checks(report, keys):
    configs = Configs(Verdicts(), keys, binaries=None)
    table = f"[{TLS_TABLE}]"

    def problems(tls_lines, env=None):
        text = MEMBER + f"{table}\n" + "".join(f'{line} = "x"\n' for line in tls_lines)
        return configs.problems(Config("self-test", toml_loads(text)), env=env)[0]

    required = sorted(keys.tls_required)
    env = {f"ZABKEEPER_{TLS_TABLE.upper()}_{k.upper()}": "x" for k in required}
    results = {
        "every key": problems(sorted(keys.tls)),
        "an unknown key": problems(required + [UNKNOWN]),
        "the required keys left to the environment": problems([], env),
        "a required key left out": problems(required[1:]) if required else ["(no required key)"],
    }
    want = {
        "every key": [],
        "an unknown key": [f"{table}: unknown keys {UNKNOWN}"],
        "the required keys left to the environment": [],
        "a required key left out": [f"{table}: missing {required[0]}"] if required else ["(no required key)"],
    }
    report.check(results == want and bool(keys.tls),
                 f"self-test: a {table} table of FileTls's keys passes the config check; an unknown key in it,"
                 f" or a required key ({', '.join(required)}) neither in it nor in the environment, is reported",
                 f"self-test: the config check's verdicts on a {table} table: {results}, want {want}")

    variables = [f"ZABKEEPER_{TLS_TABLE.upper()}_{k.upper()}" for k in sorted(keys.tls)]
    refused = [f"ZABKEEPER_{TLS_TABLE.upper()}_{UNKNOWN.upper()}", f"ZABKEEPER_{TLS_TABLE.upper()}"]
    verdicts = Verdicts()
    CommandLines(None, verdicts).check_env("self-test", variables + refused, keys)
    got = [status for status, _ in verdicts.verdicts]
    report.check(got == ["ok"] * len(variables) + ["fail"] * len(refused) and bool(variables),
                 f"self-test: ZABKEEPER_{TLS_TABLE.upper()}_<KEY> is accepted for the {len(variables)} {table} keys,"
                 f" refused for another key and alone",
                 f"self-test: the variable check's verdicts: {verdicts.verdicts}")
