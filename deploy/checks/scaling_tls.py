"""Peer TLS for the live scaling check (checks/scaling.py): the ConfigMap's
commented `[tls]` block enabled as it stands, and a CA and one certificate per
pod made for it with the `openssl` CLI (`make openssl-package` installs it).

Each pod's certificate names its host in the headless Service, zk-N.zk-hs:
the host of its peer address, which is what a member's peer certificate must
carry under `peer = true` (src/security/tls.rs, PeerTls: a member is checked against
the host of its peer address in the configuration in force, unless the file
gives it a `peer_name`), and the name the check's own gRPC calls dial. Both
server and client use are allowed, since a member shows it both when it
listens and when it dials.
"""

import re
import shutil
import subprocess
from pathlib import Path

from .common import toml_loads

# The commented block as the ConfigMap writes it: `# [tls]`, then its keys.
COMMENTED_BLOCK = re.compile(r"^# \[tls\]\n(?:# [a-z_]+ = .*\n)+", re.M)
FILES = ("cert_file", "key_file", "ca_file")


def commented_tls(config_text):
    """The [tls] settings the file's commented block would enable, and why
    it cannot be run when it cannot: (settings, None) or (None, why)."""
    m = COMMENTED_BLOCK.search(config_text)
    if not m:
        return None, "the ConfigMap's file has no commented [tls] block (`# [tls]` and its `# key = value` lines)"
    try:
        settings = toml_loads(uncomment(m.group(0)))["tls"]
    except Exception as e:  # noqa: BLE001 - tomllib's and tomli's errors differ
        return None, f"its commented [tls] block does not parse once uncommented: {e}"
    missing = [k for k in FILES if not settings.get(k)]
    if missing:
        return None, f"its commented [tls] block lacks {', '.join(missing)}"
    if settings.get("peer") is not True:
        return None, "its commented [tls] block does not set peer = true"
    return settings, None


def uncomment(block):
    return "".join(line[2:] + "\n" for line in block.splitlines())


def enable_tls(config_text, mapped):
    """The file with its commented [tls] block uncommented, each path in it
    rewritten by `mapped` (a path in the pod -> where the check keeps it)."""
    def enabled(m):
        text = uncomment(m.group(0))
        return re.sub(r'^([a-z_]+_file = )"([^"]*)"', lambda f: f'{f.group(1)}"{mapped(f.group(2))}"', text, flags=re.M)
    return COMMENTED_BLOCK.sub(enabled, config_text, count=1)


def openssl_missing():
    """Why certificates cannot be made here, or None."""
    if shutil.which("openssl") is None:
        return "no `openssl` command here (`make openssl-package` installs Debian's)"
    return None


def make_certificates(settings, mapped, names, service):
    """A CA at settings' ca_file and, for each pod name zk-N (member N+1), a
    key and certificate at its key_file and cert_file ({id} replaced), naming
    zk-N.SERVICE; every path through `mapped`. Returns the CA's path."""
    ca = Path(mapped(settings["ca_file"]))
    ca.parent.mkdir(parents=True, exist_ok=True)
    work = ca.parent / "openssl-work"
    work.mkdir(exist_ok=True)

    def openssl(*args):
        out = subprocess.run(["openssl", *args], cwd=work, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"openssl {args[0]}: {(out.stderr or out.stdout).strip()[-300:]}")

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca_key = work / "ca-key.pem"
    openssl("req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
            "-subj", "/CN=deploy-check scaling CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for ordinal, name in enumerate(names):
        member = str(ordinal + 1)
        cert = Path(mapped(settings["cert_file"].replace("{id}", member)))
        key = Path(mapped(settings["key_file"].replace("{id}", member)))
        for path in (cert, key):
            path.parent.mkdir(parents=True, exist_ok=True)
        dns = f"{name}.{service}"
        csr, ext = work / f"{name}.csr", work / f"{name}.ext"
        ext.write_text(f"subjectAltName=DNS:{dns}\n"
                       "basicConstraints=critical,CA:FALSE\n"
                       "keyUsage=critical,digitalSignature\n"
                       "extendedKeyUsage=serverAuth,clientAuth\n")
        openssl("req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={dns}")
        openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-set_serial", str(1000 + ordinal),
                "-out", str(cert), "-days", "2", "-extfile", str(ext))
    return ca
