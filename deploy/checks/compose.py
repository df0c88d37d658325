"""The docker compose file: each member its id, its own volume and the one
shared config, mounted read-only; its healthchecks.
"""

import re
import shlex

from .common import DEPLOY, READINESS, config_env, duration_seconds, rel
from .flags import flag_value, server_invocation
from .probes import Probe, check_probe_targets


def check_compose(report, lines, configs, image, probes):
    import yaml

    path = DEPLOY / "docker-compose.yml"
    where = rel(path)
    doc = yaml.safe_load(path.read_text())
    services = doc.get("services") or {}
    named_volumes = set((doc.get("volumes") or {}).keys())
    ids, config_files, data_volumes, env_all = {}, set(), {}, {}
    for name, svc in services.items():
        at = f"{where} services.{name}"
        hostname = svc.get("hostname", name)
        entrypoint = svc.get("entrypoint")
        command = svc.get("command")
        if isinstance(entrypoint, str):
            entrypoint = shlex.split(entrypoint)
        if isinstance(command, str):
            command = shlex.split(command)
        parsed = lines.check(f"{at} command", image.argv(entrypoint, command))
        flags = server_invocation(parsed)
        if flags is None:
            report.fail(f"{at}: does not run zabkeeper")
            continue
        env = svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) for e in env)
        env = {k: str(v) for k, v in env.items()}
        env_all.update(env)
        member_id = flag_value(flags, "--id") or env.get("ZABKEEPER_ID")
        ordinal = re.fullmatch(r".*-(\d+)", hostname)
        if not member_id or not ordinal or int(member_id) != int(ordinal.group(1)) + 1:
            report.fail(f"{at}: host {hostname} has id {member_id}: want --id (or ZABKEEPER_ID) = its ordinal + 1")
        else:
            report.ok(f"{at}: host {hostname} runs member {member_id}")
            ids[name] = int(member_id)
        config_path = flag_value(flags, "--config") or env.get("ZABKEEPER_CONFIG")
        mounts = [v if isinstance(v, str) else f"{v.get('source')}:{v.get('target')}{':ro' if v.get('read_only') else ''}"
                  for v in svc.get("volumes") or []]
        for mount in mounts:
            parts = mount.split(":")
            source, target, mode = parts[0], parts[1] if len(parts) > 1 else parts[0], parts[2] if len(parts) > 2 else ""
            if target == config_path:
                report.check("ro" in mode.split(","), f"{at}: config {source} mounted read-only at {target}",
                             f"{at}: config {source} mounted writable at {target}")
                config_files.add((DEPLOY / source).resolve())
            elif source in named_volumes:
                data_volumes[name] = (source, target)
        healthcheck = svc.get("healthcheck") or {}
        test = healthcheck.get("test")
        if test:
            # Compose unescapes $$ to $ before Docker sees the command.
            test = [t.replace("$$", "$") for t in test] if isinstance(test, list) else test.replace("$$", "$")
            argv = test[1:] if isinstance(test, list) and test[0] == "CMD" else \
                ["/bin/sh", "-c", test[1] if isinstance(test, list) else test]
            probes.append(Probe(f"{at} healthcheck", READINESS, argv, duration_seconds(healthcheck.get("timeout"), 30)))
    if len(config_files) != 1:
        report.fail(f"{where}: members mount {len(config_files)} different config files; want one shared file")
        return
    config_file = config_files.pop()
    lines.check_env(where, sorted(env_all), configs.keys)
    config = configs.check(rel(config_file), config_file.read_text(), members=len(services),
                           host_pattern=lambda i: rf"zk-{i - 1}", env=config_env(env_all),
                           needs_ruok=False)
    if not config:
        return
    report.check(sorted(ids.values()) == sorted(config.members),
                 f"{where}: services run ids {sorted(ids.values())}, the config's members",
                 f"{where}: services run ids {sorted(ids.values())}, but the config has {sorted(config.members)}")
    data_dir = config.data.get("data_dir")
    volumes = list(data_volumes.values())
    report.check(len(volumes) == len(services) and len({v[0] for v in volumes}) == len(volumes)
                 and all(t == data_dir for _, t in volumes),
                 f"{where}: each member has its own named volume at data_dir {data_dir}",
                 f"{where}: data volumes {data_volumes}, want one named volume per member at {data_dir}")
    for probe in [p for p in probes if p.where.startswith(where)]:
        check_probe_targets(report, probe.where, probe, config, 1, lines)
