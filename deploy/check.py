#!/usr/bin/env python3
"""Checks the files in deploy/ against the code they deploy.

    python3 deploy/check.py --zabkeeper target/debug/zabkeeper --zkctl target/debug/zkctl

1. Kubernetes schemas: every object of every manifest under deploy/kubernetes/
   validates, strictly (unknown fields are errors), against the schemas of the
   oldest and the newest Kubernetes version supported (kubernetes-validate,
   from PyPI, installed into a venv on first use). Each kustomization.yaml
   lists exactly the manifests beside it.
2. Wiring: in each manifest set the Services, PodDisruptionBudget and
   NetworkPolicy select the StatefulSet's pods, the headless Service is the
   StatefulSet's and publishes not-ready pods, the ConfigMap holds the file
   `--config` names, `replicas` equals the config's member count, the data
   directory is on a claim, the ports match the config's; an admin API on the
   pod network has a token from the environment (for zabkeeper and zkctl), is
   in no Service, and the NetworkPolicy opens it to the members only. The
   ConfigMap scripts the pods run are one copy across sets. The compose file
   gives each member its id, its volume and the shared config; the Dockerfile's
   default config, volume and ports agree; the systemd unit is hardened.
3. Command lines: every flag passed to `zabkeeper` or `zkctl` by the
   Dockerfile (ENTRYPOINT, CMD, HEALTHCHECK), the compose file (entrypoint,
   command, healthcheck), the StatefulSet (command, args, probes) and the
   systemd unit (Exec*=) exists in that binary's `--help` (for zkctl, in the
   help of the subcommand it is given to, which must be a whole command), and
   every ZABKEEPER_*/ZKCTL_* variable they set is one the binaries read. A
   shell script a container or its hook runs from a ConfigMap (`sh PATH`)
   must parse (`dash -n`, the image's /bin/sh) and its command lines pass the
   same check.
4. Configs: every embedded TOML config (image default, compose, ConfigMaps,
   systemd example) parses, uses only keys of crates/config's FileConfig,
   FileMember and FileTls (its [tls] table), numbers its members 1..N with host names zk-<id-1>, keeps the
   admin API on loopback (or, with admin_allow_remote, takes a token from a
   file or the environment) and secrets out; and the binary itself accepts it for
   every member (`zabkeeper --config F --id N --print-connect-strings`).
5. Probes, live: in a private network and UTS namespace (root or user
   namespaces needed; skipped, saying so, otherwise), the real binaries run
   every health check and probe command: all fail with nothing running; with a
   lone member of a 3-member ensemble (started as host `zk-0` without --id, so
   the id must come from the host name) liveness-type checks pass and
   readiness-type checks fail; with the image's default config (data directory
   from ZABKEEPER_DATA_DIR) every check passes, each within its own timeout.
6. Scaling, live (namespaces as in 5, plus a mount namespace for /etc/hosts):
   the ConfigMap's member.sh runs as the container's command and preStop hook
   of pods zk-0..zk-4 of the smallest set, each with its own host name and
   loopback address: 3 -> 5 (the new pods are added as observers, join and
   promote themselves), a joined pod restarted as an observer (promoted, not
   added again), both new pods' hooks at once, one of them the leader
   (5 -> 3), a first member's hook (no change), a removed pod back on its data
   (added again). All of it twice: on the ConfigMap's file as it is, and with
   its commented [tls] block enabled (peer and gRPC TLS; a CA and per-pod
   certificates made with `openssl`, skipped, saying so, without it).

Prints one line per check and exits 1 if any failed. The checks themselves
are in deploy/checks/, one module per job.
"""

import argparse
import os
import sys
from pathlib import Path

from checks.common import REPO, Report
from checks.compose import check_compose
from checks.configs import Configs, config_keys
from checks.dependencies import KUBERNETES_VALIDATE, ensure_dependencies
from checks.docker import check_dockerfile
from checks.docs import check_config_reference
from checks.flags import Binaries, CommandLines
from checks.kubernetes import check_kubernetes, kubernetes_validator
from checks.live import check_probes_live, probe_worker
from checks.scaling import check_scaling_live, scaling_worker
from checks.selftest import check_the_checks
from checks.systemd import check_systemd


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zabkeeper", type=Path, help="the zabkeeper binary whose flags and config parsing count")
    parser.add_argument("--zkctl", type=Path, help="the zkctl binary whose flags count")
    parser.add_argument("--venv", type=Path, default=REPO / "target" / "deploy-check-venv",
                        help="where kubernetes-validate is installed if this Python lacks it (default: %(default)s)")
    parser.add_argument("--probe-worker", help=argparse.SUPPRESS)
    parser.add_argument("--scaling-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe_worker:
        sys.exit(probe_worker(args.probe_worker))
    if args.scaling_worker:
        sys.exit(scaling_worker(args.scaling_worker))
    for name in ("zabkeeper", "zkctl"):
        path = getattr(args, name)
        if path is None:
            parser.error(f"--{name} is required")
        if not os.access(path, os.X_OK):
            parser.error(f"--{name} {path}: not an executable file")
    ensure_dependencies(args.venv)

    report = Report()
    binaries = Binaries({"zabkeeper": args.zabkeeper.resolve(), "zkctl": args.zkctl.resolve()})
    lines = CommandLines(binaries, report)
    probes = []

    report.section("config keys the server knows (crates/config)")
    configs = Configs(report, config_keys(report), binaries)
    check_the_checks(report, configs.keys)
    check_config_reference(report, configs.keys)

    report.section("Dockerfile")
    image, image_uid = check_dockerfile(report, lines, configs, probes)
    image_config = next((REPO / srcs[0] for srcs, dest in image.copies if dest.endswith(".toml")), None)

    report.section("docker compose")
    check_compose(report, lines, configs, image, probes)

    report.section(f"Kubernetes (kubernetes-validate {KUBERNETES_VALIDATE}, strict)")
    scaling = check_kubernetes(report, lines, configs, image, image_uid, probes, kubernetes_validator(report))

    report.section("systemd")
    check_systemd(report, lines, configs)

    report.section("health checks and probes against live members")
    check_probes_live(report, binaries, probes, image_config)

    report.section("scaling the StatefulSet, live: member.sh as the container's command and preStop hook")
    check_scaling_live(report, binaries, scaling)

    print(f"\nchecked {lines.seen} command lines, {configs.count} configs and {len(probes)} probes")
    print(f"deploy-check: {report.passed} passed, {len(report.failed)} failed, {report.skipped} skipped")
    if report.failed:
        print("failed:")
        for f in report.failed:
            print(f"  {f}")
        sys.exit(1)


if __name__ == "__main__":
    main()
