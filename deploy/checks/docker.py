"""The Dockerfile: what the image runs, as whom, with which default config,
volume, ports and HEALTHCHECK.
"""

import json
import os
import re
import shlex

from .common import DEPLOY, LIVENESS, REPO, duration_seconds, rel
from .flags import flag_value, server_invocation
from .probes import Probe, check_probe_targets


def dockerfile_instructions(text):
    """(INSTRUCTION, arguments) pairs, continuation lines joined."""
    result, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        word, _, rest = current.partition(" ")
        result.append((word.upper(), rest.strip()))
        current = ""
    return result


def exec_form(args):
    """A JSON array (exec form), or the shell form as `/bin/sh -c ARGS`."""
    if args.startswith("["):
        return json.loads(args)
    return ["/bin/sh", "-c", args]



class Image:
    def __init__(self, path):
        self.path = path
        self.entrypoint, self.cmd, self.user, self.volumes, self.expose = [], [], None, [], []
        self.copies, self.healthcheck, self.healthcheck_timeout = [], None, 30
        for instruction, args in dockerfile_instructions(path.read_text()):
            if instruction == "FROM":  # only the last stage is the image
                self.entrypoint, self.cmd, self.user, self.volumes, self.expose = [], [], None, [], []
                self.copies, self.healthcheck = [], None
            elif instruction == "ENTRYPOINT":
                self.entrypoint = exec_form(args)
            elif instruction == "CMD":
                self.cmd = exec_form(args)
            elif instruction == "USER":
                self.user = args
            elif instruction == "VOLUME":
                self.volumes += json.loads(args) if args.startswith("[") else args.split()
            elif instruction == "EXPOSE":
                self.expose += [int(p.split("/")[0]) for p in args.split()]
            elif instruction == "COPY":
                words = [w for w in shlex.split(args) if not w.startswith("--")]
                if not any(w.startswith("--from") for w in shlex.split(args)):
                    self.copies.append((words[:-1], words[-1]))
            elif instruction == "HEALTHCHECK":
                options = re.findall(r"--(\w[\w-]*)=(\S+)", args)
                self.healthcheck_timeout = duration_seconds(dict(options).get("timeout"), 30)
                m = re.search(r"\bCMD\s+(.*)$", args)
                self.healthcheck = exec_form(m.group(1).strip()) if m else None

    def argv(self, entrypoint=None, command=None):
        """What a container of this image runs, given overrides."""
        return list(self.entrypoint if entrypoint is None else entrypoint) + list(self.cmd if command is None else command)


def check_dockerfile(report, lines, configs, probes):
    path = DEPLOY / "Dockerfile"
    where = rel(path)
    image = Image(path)
    argv = image.argv()
    report.check(os.path.basename(argv[0]) == "zabkeeper" if argv else False,
                 f"{where}: ENTRYPOINT runs zabkeeper", f"{where}: ENTRYPOINT is {image.entrypoint}, not zabkeeper")
    parsed = lines.check(f"{where} ENTRYPOINT+CMD", argv)
    flags = server_invocation(parsed) or {}
    config_path = flag_value(flags, "--config")
    uid = (image.user or "root").split(":")[0]
    report.check(uid.isdigit() and uid != "0", f"{where}: runs as uid {uid} (numeric, so runAsNonRoot can verify it)",
                 f"{where}: USER is {image.user!r}: want a numeric non-root uid")
    if image.healthcheck:
        probes.append(Probe(f"{where} HEALTHCHECK", LIVENESS, image.healthcheck, image.healthcheck_timeout))
    else:
        report.fail(f"{where}: no HEALTHCHECK")
    sources = [srcs for srcs, dest in image.copies if dest == config_path]
    config = None
    if not config_path or not sources:
        report.fail(f"{where}: CMD's --config {config_path} is not a file the Dockerfile copies in")
    else:
        source = REPO / sources[0][0]
        config = configs.check(rel(source), source.read_text(), needs_ruok=True)
        if config:
            data_dir = config.data.get("data_dir")
            report.check(data_dir in image.volumes, f"{where}: data_dir {data_dir} is the image's VOLUME",
                         f"{where}: data_dir {data_dir} is not a VOLUME ({image.volumes})")
            ports = sorted({config.port(1, k) for k in ("peer_addr", "grpc_addr", "client_addr", "metrics_addr")} - {None})
            report.check(sorted(image.expose) == ports, f"{where}: EXPOSE {ports} = the config's ports, admin excluded",
                         f"{where}: EXPOSE {sorted(image.expose)}, but the config listens on {ports} (admin excluded)")
    if image.healthcheck:
        check_probe_targets(report, f"{where} HEALTHCHECK", probes[-1], config, 1, lines)
    return image, uid
