"""The third-party packages the checks need (PyYAML, kubernetes-validate and,
before Python 3.11, tomli): installed into a venv on first use, and the entry
point re-run there.

Imports nothing third-party itself: it runs before they are installed.
"""

import os
import subprocess
import sys
from pathlib import Path

from .common import SCRIPT

# kubernetes-validate ships the schemas of one range of Kubernetes versions;
# pinning it keeps the verdict from changing under us.
KUBERNETES_VALIDATE = "1.37.0"
REQUIREMENTS = [f"kubernetes-validate=={KUBERNETES_VALIDATE}"]
if sys.version_info < (3, 11):
    REQUIREMENTS.append("tomli>=2,<3")


def missing_dependencies():
    missing = []
    try:
        import yaml  # noqa: F401
    except ImportError:
        missing.append("PyYAML")
    try:
        from kubernetes_validate.version import __version__
        if __version__ != KUBERNETES_VALIDATE:
            missing.append(f"kubernetes-validate {KUBERNETES_VALIDATE} (have {__version__})")
    except ImportError:
        missing.append("kubernetes-validate")
    if sys.version_info < (3, 11):
        try:
            import tomli  # noqa: F401
        except ImportError:
            missing.append("tomli")
    return missing


def pip_install(python, extra=()):
    cmd = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *extra, *REQUIREMENTS]
    print(f"check.py: installing {', '.join(REQUIREMENTS)}", file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def ensure_dependencies(venv):
    """Imports kubernetes-validate, first installing it into `venv` and
    re-running this script there when this Python lacks it."""
    if not missing_dependencies():
        return
    venv = venv.resolve()
    python = venv / "bin" / "python"
    if Path(sys.prefix).resolve() == venv:
        if os.environ.get("DEPLOY_CHECK_INSTALLED"):
            sys.exit(f"check.py: still missing after installing: {', '.join(missing_dependencies())}")
        pip_install(python)
        os.environ["DEPLOY_CHECK_INSTALLED"] = "1"
        os.execv(str(python), [str(python), str(SCRIPT), *sys.argv[1:]])
    if not python.exists():
        print(f"check.py: creating a venv in {venv}", file=sys.stderr)
        made = subprocess.run([sys.executable, "-m", "venv", str(venv)], stdout=sys.stderr).returncode == 0
        if not made or not python.exists():
            # Debian's python3 without python3-venv: a plain directory on sys.path.
            target = venv / "site"
            print(f"check.py: no venv module; pip install --target {target}", file=sys.stderr)
            pip_install(sys.executable, ["--target", str(target)])
            sys.path.insert(0, str(target))
            if missing_dependencies():
                sys.exit(f"check.py: could not install: {', '.join(missing_dependencies())}")
            return
    os.execv(str(python), [str(python), str(SCRIPT), *sys.argv[1:]])
