"""The Kubernetes manifests: every object against the schemas of the oldest
and the newest Kubernetes supported, each kustomization against the manifests
beside it, and each set's wiring (selectors, headless Service, ConfigMap,
claims, ports, probes, the admin API's reach) against the config it deploys.
Shell scripts a container or its hooks run from a ConfigMap (member.sh, which
joins a pod beyond the ConfigMap's members and removes it on its preStop) must
parse (`sh -n` with the image's shell) and their zabkeeper and zkctl command
lines pass the flag checks; the sets share one copy of each script.
"""

import os
import re
import shutil
import subprocess

from .common import DEPLOY, LIVENESS, READINESS, config_env, rel
from .flags import SHELLS, flag_value, server_invocation
from .probes import Probe, check_probe_targets, http_probe

# What a variable set from a Secret (valueFrom) holds when the checks run the
# binaries: a token-shaped placeholder.
SECRET_PLACEHOLDER = "deploy-check-placeholder-secret"
# The image's /bin/sh (Debian's dash), when this machine has it: `sh -n` runs
# with it, so bash-only syntax in a script run with `sh` is caught.
IMAGE_SH = "dash"

# The oldest Kubernetes the manifests promise to work on, and the newest the
# pinned validator knows.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_kubernetes(report, lines, configs, image, image_uid, probes, validate):
    import yaml

    root = DEPLOY / "kubernetes"
    sets = sorted({p.parent for p in root.rglob("*.yaml")})
    scripts = {}  # ConfigMap key -> {text: [the sets that ship it]}
    scaling = []
    for directory in sets:
        manifests = sorted(p for p in directory.glob("*.yaml") if p.name != "kustomization.yaml")
        docs = []
        for manifest in manifests:
            for doc in yaml.safe_load_all(manifest.read_text()):
                if doc:
                    docs.append((manifest, doc))
        validate(report, docs)
        kustomization = directory / "kustomization.yaml"
        if kustomization.exists():
            listed = yaml.safe_load(kustomization.read_text()).get("resources") or []
            names = sorted(p.name for p in manifests)
            report.check(sorted(listed) == names, f"{rel(kustomization)}: lists every manifest beside it ({', '.join(names)})",
                         f"{rel(kustomization)}: resources {listed}, but the directory has {names}")
        spec = check_kubernetes_set(report, lines, configs, image, image_uid, probes, directory, docs, scripts)
        if spec:
            scaling.append(spec)
    for key, texts in sorted(scripts.items()):
        shipped = sorted(w for ws in texts.values() for w in ws)
        report.check(len(texts) == 1, f"{key}: one copy, the same in {', '.join(shipped)}",
                     f"{key}: differs between {' and '.join(', '.join(ws) for ws in texts.values())}: keep one script")
    return scaling


def kubernetes_validator(report):
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError, ValidationError

    def validate(report, docs):
        for manifest, doc in docs:
            name = f"{rel(manifest)} {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
            problems = []
            for version in KUBERNETES_VERSIONS:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except ValidationError as e:
                    path = ".".join(str(p) for p in e.path)
                    problems.append(f"Kubernetes {version}: {path}: {e.message}")
                except SchemaNotFoundError as e:
                    problems.append(f"Kubernetes {version}: {e.message}")
            if problems:
                for p in problems:
                    report.fail(f"{name}: {p}")
            else:
                report.ok(f"{name}: valid against Kubernetes {' and '.join(v.rsplit('.', 1)[0] for v in KUBERNETES_VERSIONS)} (strict)")

    return validate


def container_argv(image, command, args):
    """What a container of the image runs, as Kubernetes decides: `command`
    replaces the ENTRYPOINT and drops the image's CMD; `args` replaces CMD."""
    if command is not None:
        return list(command) + list(args or [])
    return image.argv(None, args)


def script_path(argv):
    """The script file a `sh PATH [ARGS]` command line runs, or None."""
    if argv and os.path.basename(argv[0]) in SHELLS and len(argv) > 1 and not argv[1].startswith("-"):
        return argv[1]
    return None


def mount_of(mounts, path):
    """The volumeMount under which `path` is, the deepest one."""
    best = None
    for m in mounts:
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"].rstrip("/")):
                best = m
    return best


def config_map_file(container, volumes, config_maps, path):
    """(ConfigMap, key) of the file at `path` in the container, or None."""
    mount = mount_of(container.get("volumeMounts") or [], path or "")
    volume = volumes.get(mount["name"]) if mount else None
    if not volume or "configMap" not in volume or volume["configMap"]["name"] not in config_maps:
        return None
    cm = config_maps[volume["configMap"]["name"]]
    key = mount.get("subPath") or path[len(mount["mountPath"].rstrip("/")) + 1:]
    return cm, key


def check_syntax(report, where, shell, text):
    """`SHELL -n`: the script parses, with the image's /bin/sh for `sh`."""
    name = os.path.basename(shell)
    candidates = [IMAGE_SH, "sh"] if name == "sh" else [name]
    found = next((c for c in candidates if shutil.which(c)), None)
    if not found:
        report.skip(f"{where}: no {' or '.join(candidates)} here to run `-n` with")
        return
    out = subprocess.run([found, "-n"], input=text, capture_output=True, text=True, timeout=30)
    report.check(out.returncode == 0, f"{where}: parses (`{found} -n`)",
                 f"{where}: `{found} -n` refuses it: {out.stderr.strip()[-300:]}")


def check_kubernetes_set(report, lines, configs, image, image_uid, probes, directory, docs, scripts):
    where = rel(directory)
    by_kind = {}
    for manifest, doc in docs:
        by_kind.setdefault(doc.get("kind"), []).append(doc)
    statefulsets = by_kind.get("StatefulSet", [])
    if len(statefulsets) != 1:
        report.fail(f"{where}: {len(statefulsets)} StatefulSets, want 1")
        return
    sts = statefulsets[0]
    name = sts["metadata"]["name"]
    spec = sts["spec"]
    pod = spec["template"]
    labels = pod["metadata"].get("labels") or {}
    replicas = spec.get("replicas", 1)
    at = f"{where} StatefulSet/{name}"
    report.check(selects(spec["selector"].get("matchLabels"), labels), f"{at}: selector matches its pod labels",
                 f"{at}: selector {spec['selector']} does not match the pod labels {labels}")
    report.check(spec.get("podManagementPolicy") == "Parallel", f"{at}: podManagementPolicy Parallel (members start together)",
                 f"{at}: podManagementPolicy {spec.get('podManagementPolicy')}: with OrderedReady zk-1 waits for zk-0, which cannot be ready alone")

    services = by_kind.get("Service", [])
    headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
    clients = [s for s in services if s["spec"].get("clusterIP") != "None"]
    peer_service = spec.get("serviceName")
    hs = [s for s in headless if s["metadata"]["name"] == peer_service]
    if report.check(len(hs) == 1, f"{at}: serviceName {peer_service} is a headless Service here",
                    f"{at}: serviceName {peer_service} is not a headless Service in {where}"):
        report.check(hs[0]["spec"].get("publishNotReadyAddresses") is True,
                     f"{where} Service/{peer_service}: publishes not-ready pods (peers resolve before a quorum exists)",
                     f"{where} Service/{peer_service}: publishNotReadyAddresses is not true: members cannot find each other before they are ready")
    report.check(len(clients) >= 1, f"{where}: client Service {', '.join(s['metadata']['name'] for s in clients)}",
                 f"{where}: no client Service")
    for s in services:
        report.check(selects(s["spec"].get("selector"), labels), f"{where} Service/{s['metadata']['name']}: selects the pods",
                     f"{where} Service/{s['metadata']['name']}: selector {s['spec'].get('selector')} does not match pod labels {labels}")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        n = f"{where} PodDisruptionBudget/{pdb['metadata']['name']}"
        report.check(selects(pdb["spec"]["selector"].get("matchLabels"), labels) and pdb["spec"].get("maxUnavailable") == 1,
                     f"{n}: maxUnavailable 1 over the pods", f"{n}: want maxUnavailable 1 and a selector matching {labels}")
    if not by_kind.get("PodDisruptionBudget"):
        report.fail(f"{where}: no PodDisruptionBudget")
    for policy in by_kind.get("NetworkPolicy", []):
        report.check(selects(policy["spec"]["podSelector"].get("matchLabels"), labels),
                     f"{where} NetworkPolicy/{policy['metadata']['name']}: applies to the pods",
                     f"{where} NetworkPolicy/{policy['metadata']['name']}: podSelector does not match {labels}")

    pod_spec = pod["spec"]
    containers = pod_spec.get("containers", [])
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    config_maps = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
    checked = {}  # (script, shell) -> its command lines, parsed

    def check_command(what, container, argv):
        """The command lines of argv, or of the ConfigMap script it runs:
        [(argv, path, flags)], and the script as (ConfigMap key, text)."""
        path = script_path(argv)
        if path is None:
            return lines.check(what, argv), None
        found = config_map_file(container, volumes, config_maps, path)
        text = found and (found[0].get("data") or {}).get(found[1])
        if text is None:
            report.fail(f"{what}: runs {path}, which is no key of a ConfigMap of {where} mounted there")
            return [], None
        script = f"{where} ConfigMap/{found[0]['metadata']['name']} {found[1]}"
        report.ok(f"{what}: `{' '.join(argv)}` runs {script}")
        if (script, argv[0]) not in checked:
            shipped = scripts.setdefault(found[1], {}).setdefault(text, [])
            if where not in shipped:
                shipped.append(where)
            check_syntax(report, script, argv[0], text)
            checked[(script, argv[0])] = lines.check_script(script, text)
        return checked[(script, argv[0])], (found[1], text)

    server = None
    parsed = []
    script = None
    for c in containers:
        parsed, script = check_command(f"{at} container {c['name']}", c, container_argv(image, c.get("command"), c.get("args")))
        if server_invocation(parsed) is not None:
            server = c
            break
    if not server:
        report.fail(f"{at}: no container runs zabkeeper")
        return None
    flags = server_invocation(parsed)
    servers = [f for words, _, f in parsed if os.path.basename(words[0]) == "zabkeeper"]
    hooks = {}
    for hook, handler in sorted(((server.get("lifecycle") or {}).items())):
        if "exec" in handler:
            hooks[hook] = handler["exec"]["command"]
            check_command(f"{at} {hook}", server, handler["exec"]["command"])
    # Variables from a Secret or a field hold a placeholder when the binaries run.
    env = {e["name"]: e["value"] if "value" in e else SECRET_PLACEHOLDER for e in server.get("env") or []}
    lines.check_env(at, sorted(env), configs.keys)
    if replicas > 1:
        report.check(all("--id" not in f for f in servers) and "ZABKEEPER_ID" not in env,
                     f"{at}: no --id or ZABKEEPER_ID: each pod takes its id from its host name",
                     f"{at}: --id/ZABKEEPER_ID in a pod template gives every pod the same id")
    report.check(pod_spec.get("enableServiceLinks") is False,
                 f"{at}: enableServiceLinks false (no FOO_PORT variables the server could read as ZABKEEPER_* keys)",
                 f"{at}: enableServiceLinks is not false: a Service named zabkeeper-... would inject ZABKEEPER_* variables the server reads as config keys")
    security = pod_spec.get("securityContext") or {}
    container_security = server.get("securityContext") or {}
    report.check((container_security.get("runAsNonRoot", security.get("runAsNonRoot")) is True)
                 and str(container_security.get("runAsUser", security.get("runAsUser"))) == image_uid,
                 f"{at}: runAsNonRoot, as uid {image_uid} (the image's USER)",
                 f"{at}: want runAsNonRoot and runAsUser {image_uid} (the image's USER)")
    report.check(bool((server.get("resources") or {}).get("requests")), f"{at}: resource requests set",
                 f"{at}: no resource requests")

    config_path = flag_value(flags, "--config") or env.get("ZABKEEPER_CONFIG")
    if config_path and config_path.startswith("$") and env.get("ZABKEEPER_CONFIG"):
        # A script's copy of the ConfigMap's file (which the member may
        # rewrite after a reconfiguration): the file it copies is checked.
        report.ok(f"{at}: --config {config_path} is the script's copy of ZABKEEPER_CONFIG {env['ZABKEEPER_CONFIG']}")
        config_path = env["ZABKEEPER_CONFIG"]
    mounts = server.get("volumeMounts") or []
    claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates") or []}

    # Probes over HTTP (/livez, /readyz) need no four-letter word.
    http_probes = all("httpGet" in (server.get(p) or {}) for p in ("startupProbe", "livenessProbe"))
    config = None
    found = config_map_file(server, volumes, config_maps, config_path)
    if not found:
        report.fail(f"{at}: --config {config_path} is not in a ConfigMap of {where}")
    else:
        cm, key = found
        text = (cm.get("data") or {}).get(key)
        if text is None:
            report.fail(f"{at}: ConfigMap/{cm['metadata']['name']} has no key {key} (for --config {config_path})")
        else:
            report.ok(f"{at}: --config {config_path} is ConfigMap/{cm['metadata']['name']} key {key}")
            config = configs.check(f"{where} ConfigMap/{cm['metadata']['name']} {key}", text, members=replicas,
                                   host_pattern=lambda i: rf"{re.escape(name)}-{i - 1}\.{re.escape(peer_service or '')}(\..*)?",
                                   env=config_env(env, besides=("ZABKEEPER_CONFIG",)),
                                   needs_ruok=not http_probes)
    if config:
        data_dir = config.data.get("data_dir", "")
        m = mount_of(mounts, data_dir)
        report.check(m is not None and m["name"] in claims, f"{at}: data_dir {data_dir} is on volumeClaimTemplate {m and m['name']}",
                     f"{at}: data_dir {data_dir} is not on a volumeClaimTemplate ({sorted(claims)})")
        container_ports = {p["containerPort"]: p.get("name") for p in server.get("ports") or []}
        remote_admin = bool(config.data.get("admin_allow_remote"))
        for key in ("peer_addr", "grpc_addr", "client_addr", "metrics_addr") + (("admin_addr",) if remote_admin else ()):
            ports = {config.port(i, key) for i in config.members} - {None}
            report.check(ports <= set(container_ports), f"{at}: {key} port {sorted(ports)} is a containerPort",
                         f"{at}: {key} ports {sorted(ports)} are not all containerPorts ({sorted(container_ports)})")
        names = {v for v in container_ports.values() if v}
        for s in services:
            for p in s["spec"].get("ports", []):
                target = p.get("targetPort", p["port"])
                report.check(target in names or target in container_ports,
                             f"{where} Service/{s['metadata']['name']} port {p['port']}: targets containerPort {target}",
                             f"{where} Service/{s['metadata']['name']} port {p['port']}: targetPort {target} is no containerPort of {server['name']}")
        if remote_admin:
            check_remote_admin(report, where, at, config, container_ports, labels, services, by_kind, env)
    named_ports = {p.get("name"): p["containerPort"] for p in server.get("ports") or [] if p.get("name")}
    for probe_name, kind in (("startupProbe", LIVENESS), ("livenessProbe", LIVENESS), ("readinessProbe", READINESS)):
        probe = server.get(probe_name)
        timeout = probe.get("timeoutSeconds", 1) if probe else 1
        if probe and "httpGet" in probe:
            get = probe["httpGet"]
            port = named_ports.get(get.get("port"), get.get("port"))
            if not isinstance(port, int):
                report.fail(f"{at}: {probe_name} httpGet port {get.get('port')!r} is no containerPort")
                continue
            p = http_probe(f"{at} {probe_name}", kind, port, get.get("path", "/"), timeout, get.get("scheme", "HTTP"))
        elif probe and "exec" in probe:
            p = Probe(f"{at} {probe_name}", kind, probe["exec"]["command"], timeout)
        else:
            report.fail(f"{at}: no exec or httpGet {probe_name}")
            continue
        probes.append(p)
        check_probe_targets(report, p.where, p, config, 1, lines)
    # What the live scaling check runs (checks/scaling.py).
    if not (script and config and "preStop" in hooks):
        return None
    return {
        "where": where, "statefulset": name, "service": peer_service, "replicas": replicas,
        "config_mount": mount_of(mounts, config_path)["mountPath"],
        "files": {k: v for k, v in (found[0].get("data") or {}).items()}, "config_key": found[1],
        "env": env, "start": container_argv(image, server.get("command"), server.get("args")), "pre_stop": hooks["preStop"],
        "grace_seconds": pod_spec.get("terminationGracePeriodSeconds", 30),
        "admin_port": config.port(1, "admin_addr"), "grpc_port": config.port(1, "grpc_addr"),
        "peer_port": config.port(1, "peer_addr"), "client_port": config.port(1, "client_addr"),
    }


def check_remote_admin(report, where, at, config, container_ports, labels, services, by_kind, env):
    """An admin API on the pod network: a token from the environment for the
    server and for zkctl in the pod, reached by the members only (the
    NetworkPolicy), in no Service."""
    port = config.port(1, "admin_addr")
    name = container_ports.get(port)
    report.check("ZKCTL_ADMIN_TOKEN" in env or not ({"ZABKEEPER_ADMIN_TOKEN", "ZABKEEPER_ADMIN_TOKEN_FILE"} & set(env)),
                 f"{at}: ZKCTL_ADMIN_TOKEN set beside the server's token (probes and scripts call zkctl admin)",
                 f"{at}: the server's admin token is set but ZKCTL_ADMIN_TOKEN is not: zkctl in the pod (probes, scripts) is refused")
    for s in services:
        exposed = [p for p in s["spec"].get("ports", []) if p.get("targetPort", p["port"]) in (port, name)]
        report.check(not exposed, f"{where} Service/{s['metadata']['name']}: does not expose the admin port {port}",
                     f"{where} Service/{s['metadata']['name']}: exposes the admin port {port}")
    policies = by_kind.get("NetworkPolicy", [])
    if not policies:
        report.fail(f"{where}: the admin API listens on the pod network (admin_allow_remote) and no NetworkPolicy limits who reaches it")
        return
    opened = []
    for policy in policies:
        for rule in policy["spec"].get("ingress") or []:
            ports = [p.get("port") for p in rule.get("ports") or []]
            if ports and port not in ports and (name is None or name not in ports):
                continue
            peers = rule.get("from") or []
            members_only = bool(peers) and all(set(f) == {"podSelector"} and selects((f["podSelector"] or {}).get("matchLabels"), labels)
                                               for f in peers)
            if not members_only:
                opened.append(f"NetworkPolicy/{policy['metadata']['name']} {'ports ' + str(ports) if ports else 'all ports'} from {peers or 'anywhere'}")
    report.check(not opened, f"{where}: only the members reach the admin port {port} (NetworkPolicy)",
                 f"{where}: the admin port {port} is open beyond the members: {'; '.join(opened)}")
