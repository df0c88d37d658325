"""The checks behind deploy/check.py, one module per job.

common        paths, the report, helpers every check shares
dependencies  installs kubernetes-validate (and tomli) into a venv on demand
flags         command lines and ZABKEEPER_*/ZKCTL_* variables against --help
configs       TOML configs against crates/config and the binary
probes        health checks and probes: what they are, which ports they dial
docker        the Dockerfile
compose       the docker compose file
kubernetes    the manifests: schemas, kustomizations, wiring
systemd       the systemd unit
live          the probes run against live members in a private namespace
scaling       member.sh scaling the StatefulSet, live, without and with [tls]
scaling_tls   the [tls] block and the certificates for the live scaling check
selftest      the config and variable checks run on a [tls] sample, each run
"""
