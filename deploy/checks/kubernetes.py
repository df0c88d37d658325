"""The Kubernetes manifests: every object against the schemas of the oldest
and the newest Kubernetes supported, each kustomization against the manifests
beside it, and each set's wiring (selectors, headless Service, ConfigMap,
claims, ports, probes) against the config it deploys.
"""

import re

from .common import DEPLOY, LIVENESS, READINESS, config_env, rel
from .flags import flag_value, server_invocation
from .probes import Probe, check_probe_targets

# The oldest Kubernetes the manifests promise to work on, and the newest the
# pinned validator knows.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_kubernetes(report, lines, configs, image, image_uid, probes, validate):
    import yaml

    root = DEPLOY / "kubernetes"
    sets = sorted({p.parent for p in root.rglob("*.yaml")})
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
        check_kubernetes_set(report, lines, configs, image, image_uid, probes, directory, docs)


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


def check_kubernetes_set(report, lines, configs, image, image_uid, probes, directory, docs):
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
    server = None
    parsed = []
    for c in containers:
        parsed = lines.check(f"{at} container {c['name']}", image.argv(c.get("command"), c.get("args")))
        if server_invocation(parsed) is not None:
            server = c
            break
    if not server:
        report.fail(f"{at}: no container runs zabkeeper")
        return
    flags = server_invocation(parsed)
    env = {e["name"]: e.get("value") for e in server.get("env") or []}
    lines.check_env(at, sorted(env), configs.keys)
    if replicas > 1:
        report.check("--id" not in flags and "ZABKEEPER_ID" not in env,
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
    mounts = server.get("volumeMounts") or []
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates") or []}

    def mount_of(path):
        best = None
        for m in mounts:
            mp = m["mountPath"].rstrip("/")
            if path == mp or path.startswith(mp + "/"):
                if best is None or len(mp) > len(best["mountPath"].rstrip("/")):
                    best = m
        return best

    config = None
    mount = mount_of(config_path or "")
    volume = volumes.get(mount["name"]) if mount else None
    config_maps = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
    if not volume or "configMap" not in volume or volume["configMap"]["name"] not in config_maps:
        report.fail(f"{at}: --config {config_path} is not in a ConfigMap of {where}")
    else:
        cm = config_maps[volume["configMap"]["name"]]
        key = mount.get("subPath") or config_path[len(mount["mountPath"].rstrip("/")) + 1:]
        text = (cm.get("data") or {}).get(key)
        if text is None:
            report.fail(f"{at}: ConfigMap/{cm['metadata']['name']} has no key {key} (for --config {config_path})")
        else:
            report.ok(f"{at}: --config {config_path} is ConfigMap/{cm['metadata']['name']} key {key}")
            config = configs.check(f"{where} ConfigMap/{cm['metadata']['name']} {key}", text, members=replicas,
                                   host_pattern=lambda i: rf"{re.escape(name)}-{i - 1}\.{re.escape(peer_service or '')}(\..*)?",
                                   env=config_env(env, besides=("ZABKEEPER_CONFIG",)),
                                   needs_ruok=True)
    if config:
        data_dir = config.data.get("data_dir", "")
        m = mount_of(data_dir)
        report.check(m is not None and m["name"] in claims, f"{at}: data_dir {data_dir} is on volumeClaimTemplate {m and m['name']}",
                     f"{at}: data_dir {data_dir} is not on a volumeClaimTemplate ({sorted(claims)})")
        container_ports = {p["containerPort"]: p.get("name") for p in server.get("ports") or []}
        for key in ("peer_addr", "grpc_addr", "client_addr", "metrics_addr"):
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
    for probe_name, kind in (("startupProbe", LIVENESS), ("livenessProbe", LIVENESS), ("readinessProbe", READINESS)):
        probe = server.get(probe_name)
        if not probe or "exec" not in probe:
            report.fail(f"{at}: no exec {probe_name}")
            continue
        p = Probe(f"{at} {probe_name}", kind, probe["exec"]["command"], probe.get("timeoutSeconds", 1))
        probes.append(p)
        check_probe_targets(report, p.where, p, config, 1, lines)
