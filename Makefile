# zabkeeper: one target per task; CI (.ci/run) calls the same targets.
CARGO ?= cargo
NODES ?= 3
RUN_DIR ?= run

.PHONY: mdbook help build build-all check-circles test test-soak-sim test-nemesis test-multi-host test-curator test-kazoo test-side-by-side test-zk-import test-admin-http test-ui test-soak-disk soak-disk network-tools openssl-package chromium-package strace-package zookeeper-package java-clients debian-packages fmt fmt-check lint check-purity check-deploy run stop bench bench-failover bench-vs-zookeeper bench-ceiling bench-allocations fuzz doc docs clean

# Where cargo puts its builds (honours CARGO_TARGET_DIR).
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)

ifeq ($(NODES),1)
CONFIG ?= ensemble-configs/single.toml
else
CONFIG ?= ensemble-configs/local-$(NODES).toml
endif

# Every debug-profile build and test names the whole workspace with its test
# targets. Cargo picks a dependency's features from the packages and targets
# a command selects, so `build --bins` or `test -p one-crate` would resolve
# other features than `build-all` and compile much of the tree again (CI lost
# four minutes to that). These spell the one resolution all targets share.
BUILD_ALL = $(CARGO) build --workspace --all-targets
TEST_WORKSPACE = $(CARGO) test --workspace

# The lint's flags, for `make lint` and for the lint in the build below.
CLIPPY_FLAGS = -D warnings
# LINT_IN_BUILD=1 (CI exports it): every cargo call lints the workspace's
# crates as it compiles them, through clippy-driver as cargo's workspace
# wrapper, which is how `cargo clippy` runs it; no second pass checks the
# dependencies again. Cargo counts the wrapper in each workspace crate's
# fingerprint, so it must be set for every call that should reuse the build.
ifeq ($(LINT_IN_BUILD),1)
empty :=
space := $(empty) $(empty)
export RUSTC_WORKSPACE_WRAPPER = clippy-driver
# The form `cargo clippy -- FLAGS` hands clippy-driver its arguments in.
export CLIPPY_ARGS = $(subst $(space),__CLIPPY_HACKERY__,$(strip $(CLIPPY_FLAGS)))__CLIPPY_HACKERY__
endif

## Lists every target with one line on what it does.
help:
	@awk '/^## /{ if (!doc) doc = substr($$0, 4); next } /^[A-Z_]+ *[?:]?= /{ next } /^[a-z][a-z-]*:/{ if (doc) { split($$1, t, ":"); printf "  make %-19s %s\n", t[1], doc } doc = ""; next } { doc = "" }' $(MAKEFILE_LIST)

## Builds the release binaries: zabkeeper and zkctl.
build:
	$(CARGO) build --release --bins

## Builds every crate, binary and test in the one profile CI and the tests share.
## (CI's first step: the process tests, the unit tests and the simulation at
## scale then run on what it built.)
build-all:
	$(BUILD_ALL)

## Runs every test of every crate (unit, property, simulation, real processes).
## The binaries are built first: the process tests run zkctl, which is
## another package.
test:
	$(BUILD_ALL)
	$(CARGO) test --workspace --all-targets

## Runs the simulation at scale: SIM_SEEDS schedules of 3 and of 5 replicas.
## SIM_SEEDS seeded schedules of 3 replicas and as many of 5 (CI runs 2000
## of each), on every core, in the profile the tests share. A failure prints
## the seed that replays it.
SIM_SEEDS ?= 5000
# Where the window of seeds starts: CI runs the first SIM_SEEDS; a soak with
# SIM_SEED_START=100000 (say) runs schedules CI never has.
SIM_SEED_START ?= 0
test-soak-sim:
	SIM_SEEDS=$(SIM_SEEDS) SIM_SEED_START=$(SIM_SEED_START) $(TEST_WORKSPACE) --lib -- --nocapture survive_faults

## Runs the nemesis: kill -9 and SIGSTOP under load, then checks the history.
## Consistency on real processes: clients on every member of a 3-member
## ensemble while a nemesis kill -9s and SIGSTOPs leaders and followers for
## NEMESIS_SECS seconds, then a full crash; the history is checked for
## linearizable writes, session order and durability. (`make test` runs it
## for 15 s.)
NEMESIS_SECS ?= 60
test-nemesis:
	$(BUILD_ALL)
	NEMESIS_SECS=$(NEMESIS_SECS) $(TEST_WORKSPACE) --test nemesis -- --nocapture

## Runs members on hosts of their own (network namespaces): link faults, membership changes.
## Members on hosts of their own (Linux network namespaces on a bridge the test
## makes; needs root), by host name, TLS on. Three members meet a follower cut
## off, the leader isolated, a lossy and slow link, a rolling restart under
## load, members with the wrong certificate; then an ensemble grows 3 -> 5 by
## --join, shrinks back, replaces dead members (same id, new id) and promotes an
## observer, under writes. iptables (Debian's package) adds the loss and, with
## NFQUEUE, the delay where the kernel has no sch_netem.
test-multi-host: network-tools java-clients
	$(BUILD_ALL)
	@py=$$(.ci/python-env | tail -n 1) && \
		ZABKEEPER_TEST_PYTHON=$$py $(TEST_WORKSPACE) --test multi_host -- --ignored --nocapture

## Installs iproute2 and iptables (Debian) for test-multi-host.
## iproute2 (namespaces, veth, bridge, tc) and iptables, from Debian's packages.
network-tools:
	@$(MAKE) --no-print-directory debian-packages WHAT="network tools" \
		MARKERS="/usr/sbin/ip /usr/sbin/tc /usr/sbin/iptables" PACKAGES="iproute2 iptables"

## Formats the code (rustfmt).
fmt:
	$(CARGO) fmt

## Checks the code is formatted.
fmt-check:
	$(CARGO) fmt --check

## Runs clippy (warnings are errors), check-purity and check-circles.
## clippy with warnings as errors, plus the purity rule of the deterministic core
## and no import circle among one folder's modules.
lint: check-purity check-circles
	$(CARGO) clippy --workspace --all-targets -- $(CLIPPY_FLAGS)

## Checks deploy/ (manifests, flags, configs, probes) against the binaries.
## Checks deploy/ against the binaries: every Kubernetes manifest against the
## Kubernetes schemas (kubernetes-validate from PyPI, into a venv under
## $(TARGET_DIR)), every flag and variable the Dockerfile, compose file,
## manifests and systemd unit pass against --help, every config against
## crates/config and the server itself, and the health checks and probes against
## live members in a private network namespace.
check-deploy:
	@$(MAKE) --no-print-directory openssl-package
	$(BUILD_ALL)
	python3 deploy/check.py --zabkeeper $(TARGET_DIR)/debug/zabkeeper --zkctl $(TARGET_DIR)/debug/zkctl --venv $(TARGET_DIR)/deploy-check-venv

## Checks the pure core reaches no clock, I/O, threads or random-order hashing.
## The pure core (crates/core) cannot name tokio, tonic, sled or rand: its
## manifest lacks them. This checks what a manifest cannot: no impure crate
## reached through a dependency, and no clock, environment, file, socket,
## thread or std HashMap (random iteration order) in its code; then proves
## the check on planted violations.
check-purity:
	python3 crates/core/purity.py
	python3 crates/core/purity.py --self-test

## Checks no two modules of one folder import each other, directly or round a loop.
## Cargo refuses cycles between crates, not between the modules of one crate:
## this follows every crate and test binary from its root and names each
## circle with what ties it; then proves the check on a planted circle.
check-circles:
	python3 integration-tests/import_circles.py
	python3 integration-tests/import_circles.py --self-test

## Starts a local ensemble in the background (NODES=1, 3 or 5).
## Starts a local ensemble in the background (NODES=1, 3 or 5), data and logs under $(RUN_DIR)/.
run: build
	@if [ -s $(RUN_DIR)/pids ]; then echo "an ensemble is already running (make stop first)"; exit 1; fi
	@mkdir -p $(RUN_DIR)/logs
	@# Each member runs on a copy of its own: a reconfiguration rewrites it, never the checked-in file.
	@for id in $$(seq 1 $(NODES)); do \
		[ -e $(RUN_DIR)/zk$$id.toml ] || cp $(CONFIG) $(RUN_DIR)/zk$$id.toml; \
		nohup target/release/zabkeeper --config $(RUN_DIR)/zk$$id.toml --id $$id >$(RUN_DIR)/logs/zk$$id.log 2>&1 & \
		echo $$! >>$(RUN_DIR)/pids; \
	done
	@echo "started $(NODES) server(s) from copies of $(CONFIG) ($(RUN_DIR)/zkN.toml); logs in $(RUN_DIR)/logs, data in $(RUN_DIR)/data"
	@target/release/zabkeeper --config $(CONFIG) --id 1 --print-connect-strings
	@echo "try: target/release/zkctl --server $$(target/release/zabkeeper --config $(CONFIG) --id 1 --print-connect-strings | sed -n 's/^grpc: //p') ls /"

## Stops the ensemble `make run` started.
## Stops the ensemble started by `make run` (SIGTERM: clean shutdown).
stop:
	@if [ -s $(RUN_DIR)/pids ]; then \
		for pid in $$(cat $(RUN_DIR)/pids); do kill $$pid 2>/dev/null || true; done; \
		for pid in $$(cat $(RUN_DIR)/pids); do \
			for i in $$(seq 1 50); do kill -0 $$pid 2>/dev/null || break; sleep 0.1; done; \
		done; \
		rm -f $(RUN_DIR)/pids; echo "stopped"; \
	else echo "nothing running"; fi

## Runs kazoo (Python) against a 3-member ensemble.
## kazoo (from PyPI, into a venv under .ci/) against a 3-member ensemble of the
## debug binary: CRUD, watches, the Election and Lock recipes, and a session
## over TLS (certificates made with Debian's openssl).
test-kazoo:
	@$(MAKE) --no-print-directory openssl-package
	$(BUILD_ALL)
	@py=$$(.ci/python-env | tail -n 1) && \
		$$py integration-tests/kazoo_smoke.py --binary $(TARGET_DIR)/debug/zabkeeper

## Compares zabkeeper with Apache ZooKeeper op by op, then through zkCli.sh.
## The same operations against Apache ZooKeeper (Debian's `zookeeper` package)
## and one zabkeeper server, compared op by op, then a scripted zkCli.sh session
## against both (a 3-member ensemble here), then the AdminServer HTTP commands
## (test-admin-http), then the migration (test-zk-import); skipped, saying
## why, when the package is not installed (`make zookeeper-package` installs it).
test-side-by-side:
	$(BUILD_ALL)
	python3 integration-tests/zk_side_by_side.py --binary $(TARGET_DIR)/debug/zabkeeper
	python3 integration-tests/zkcli_compare.py --binary $(TARGET_DIR)/debug/zabkeeper
	python3 integration-tests/admin_http_compare.py --binary $(TARGET_DIR)/debug/zabkeeper
	@py=$$(.ci/python-env | tail -n 1) && \
		$$py integration-tests/zk_import.py --binary $(TARGET_DIR)/debug/zabkeeper

## Migrates a tree from Apache ZooKeeper with zkctl import; compares every node.
## A tree built by kazoo on Debian's Apache ZooKeeper (every create mode, ACLs,
## binary data, a multi, open sessions; a snapshot every 20 transactions),
## `zkctl import`ed, then served by one zabkeeper member and by ZooKeeper
## restarted on its data: every node compared field by field, the next
## sequential name and the zxid checked (kazoo from .ci/python-env).
test-zk-import:
	$(BUILD_ALL)
	@py=$$(.ci/python-env | tail -n 1) && \
		$$py integration-tests/zk_import.py --binary $(TARGET_DIR)/debug/zabkeeper

## Checks the AdminServer HTTP commands field by field against Apache ZooKeeper's.
## A 3-member zabkeeper ensemble and a 3-member Apache ZooKeeper with its
## AdminServer on loopback (Debian's package): every command both serve,
## compared by field names and JSON types on a leader and a follower; then
## /livez, /readyz, and snapshot and restore behind the admin token. Without
## the package the comparison is skipped, saying why; the rest still runs.
test-admin-http:
	$(BUILD_ALL)
	python3 integration-tests/admin_http_compare.py --binary $(TARGET_DIR)/debug/zabkeeper

## Drives the web console (/ui/) in headless Chromium against 3 members.
## Debian's Chromium (installed if missing, as the packages above are) over
## the DevTools protocol, kazoo from .ci/python-env: each view checked against
## the admin API, edits with and without the token read back with kazoo, the
## live changes, a killed member shown as down. Screenshots of each view go
## to target/ui-screenshots/ (CI keeps them).
test-ui:
	@$(MAKE) --no-print-directory chromium-package
	$(BUILD_ALL)
	@py=$$(.ci/python-env | tail -n 1) && \
		$$py integration-tests/console_ui.py --binary $(TARGET_DIR)/debug/zabkeeper \
		--screenshots $(TARGET_DIR)/ui-screenshots

## Installs Chromium (Debian) for test-ui.
## Debian's chromium package, which test-ui drives headless.
chromium-package:
	@$(MAKE) --no-print-directory debian-packages WHAT=chromium MARKERS=/usr/bin/chromium PACKAGES=chromium

## Installs openssl (Debian) for test-kazoo.
## openssl, which the kazoo smoke test makes its certificates with.
openssl-package:
	@$(MAKE) --no-print-directory debian-packages WHAT=openssl MARKERS=/usr/bin/openssl PACKAGES=openssl

## The same as test-soak-disk.
## The same as test-soak-disk (the name issue 30 gave it).
soak-disk: test-soak-disk

## Installs strace (Debian) for the storage fsync test.
## strace, which integration-tests/storage_fsync.rs runs a writer under (it is
## skipped, saying why, without it; CI installs it).
strace-package:
	@$(MAKE) --no-print-directory debian-packages WHAT=strace MARKERS=/usr/bin/strace PACKAGES=strace

## Installs Apache ZooKeeper (Debian) for the comparisons.
## Installs Debian's zookeeper package (as root, or with sudo when it asks no
## password); says why not when it cannot.
zookeeper-package:
	@$(MAKE) --no-print-directory debian-packages WHAT="zookeeper package" MARKERS=/usr/share/java/zookeeper.jar PACKAGES=zookeeper

## Installs a JDK, Curator and zkCli.sh (Debian) for test-curator.
## Curator (Java), a JDK to compile against it, and zkCli.sh, from Debian's
## packages: what integration-tests/curator.rs needs (it is skipped, saying
## why, without them; CI installs them).
java-clients:
	@$(MAKE) --no-print-directory debian-packages WHAT="java clients" \
		MARKERS="/usr/bin/javac /usr/share/java/curator-framework.jar /usr/share/java/curator-recipes.jar /usr/share/zookeeper/bin/zkCli.sh" \
		PACKAGES="default-jdk-headless libcurator-framework-java libcurator-recipes-java zookeeper"

## Runs Curator's recipes against a 3-member ensemble.
## Curator's recipes against a 3-member ensemble (needs `make java-clients`).
test-curator:
	$(BUILD_ALL)
	$(TEST_WORKSPACE) --test integration -- --nocapture curator::

# apt-get install $(PACKAGES) unless every file of $(MARKERS) exists, as root or with password-less sudo.
## Installs PACKAGES from Debian unless MARKERS exist (used by the above).
debian-packages:
	@if ls $(MARKERS) >/dev/null 2>&1; then echo "$(WHAT): already installed"; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "$(WHAT): no apt-get here, not installed"; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(PACKAGES) \
		|| echo "$(WHAT): apt-get install failed, not installed"; \
	elif sudo -n true 2>/dev/null; then sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(PACKAGES) \
		|| echo "$(WHAT): apt-get install failed, not installed"; \
	else echo "$(WHAT): not root and no password-less sudo, not installed"; fi

## Runs the criterion micro-benchmarks.
bench:
	$(CARGO) bench -p zabkeeper-bench --bench core

## Measures failover, leadership transfer and rolling restarts.
## Failover time on release binaries: kill -9 of a 3-member ensemble's leader under a
## write load, to the first write of the new epoch acknowledged; each run and the median
## (FAILOVER_RUNS, default 7; FAILOVER_SHOW_LOGS=1 prints the survivors' log lines).
## Then the longest pause of a 10 ms write probe during a leadership transfer, a
## rolling restart by SIGTERM and a kill -9 of the leader, for 3 and 5 members.
## The members run the release binary as users build it (`cargo build --release`),
## kept aside: the test build switches on its dev-dependencies' features.
bench-failover:
	$(CARGO) build --release -p zabkeeper --bin zabkeeper
	mkdir -p $(TARGET_DIR)/bench-failover
	cp $(TARGET_DIR)/release/zabkeeper $(TARGET_DIR)/bench-failover/zabkeeper
	TEST_SERVER_BINARY=$(abspath $(TARGET_DIR)/bench-failover/zabkeeper) $(CARGO) test --release --test integration -- --ignored --nocapture ensemble::failover_time handover::write_pauses

## The same ZooKeeper-protocol load against a 3-member zabkeeper and a 3-member
## Apache ZooKeeper (Debian's package; `make zookeeper-package` installs it), side
## by side, with fresh reads (local, linearizable, sync+getData). Each write phase
## is counted (CPU, context switches, syscalls, flushes per write) with perf
## (Debian's linux-perf, installed here when missing; /proc without it).
## BENCH_QUICK=1 for a short run; BENCH_ONLY_READS=1 for the fresh reads alone;
## BENCH_ONLY_WRITES=1 for the write phases, their counts and the floor alone;
## BENCH_JSON=file also writes every figure there. Not part of `make test`.
BENCH_QUICK ?=
## Benchmarks a 3-member ensemble against a 3-member Apache ZooKeeper.
bench-vs-zookeeper:
	@$(MAKE) --no-print-directory debian-packages WHAT=perf MARKERS=/usr/bin/perf PACKAGES=linux-perf
	$(CARGO) build --release -p zabkeeper -p zabkeeper-bench --bin zabkeeper --bin zk_load
	BENCH_QUICK=$(BENCH_QUICK) python3 integration-tests/zk_bench.py --binary $(TARGET_DIR)/release/zabkeeper --load $(TARGET_DIR)/release/zk_load

## Heap allocations per operation of a 3-member ensemble, counted exactly
## with uprobes on jemalloc (integration-tests/alloc_counts.py; root and perf).
bench-allocations:
	@$(MAKE) --no-print-directory debian-packages WHAT=perf MARKERS=/usr/bin/perf PACKAGES=linux-perf
	$(CARGO) build --release -p zabkeeper -p zabkeeper-bench --bin zabkeeper --bin zk_load
	python3 integration-tests/alloc_counts.py --binary $(TARGET_DIR)/release/zabkeeper --load $(TARGET_DIR)/release/zk_load

## The same benchmark with our storage in memory: the write path's ceiling.
## The write path's ceiling: the same comparison with our members' storage in
## memory (crates/bench/src/bin/memory_server.rs: no write, no fsync, NOT durable), so the
## figures say what everything but the disk costs. No scale phase.
bench-ceiling:
	$(CARGO) build --release -p zabkeeper-bench --bin memory_server --bin zk_load
	BENCH_QUICK=$(BENCH_QUICK) python3 integration-tests/zk_bench.py --binary $(TARGET_DIR)/release/memory_server --load $(TARGET_DIR)/release/zk_load --znodes 0

## Soaks one member's disk with 1.2 M overwrites; fails if it is not bounded.
## A member's disk over a long life: SOAK_WRITES (1.2 M) overwrites of 1 KiB
## values on 1 000 nodes, printing the data directory's size (log database,
## snapshots) beside what it holds as it goes; fails if it is not bounded.
SOAK_WRITES ?= 1200000
test-soak-disk:
	$(CARGO) build --release -p zabkeeper -p zabkeeper-bench --bin zabkeeper --bin zk_load
	SOAK_WRITES=$(SOAK_WRITES) python3 integration-tests/soak_disk.py --binary $(TARGET_DIR)/release/zabkeeper --load $(TARGET_DIR)/release/zk_load

## Fuzzes the wire decoders for FUZZ_SECONDS (cargo-fuzz).
## Fuzzes the wire decoders (libFuzzer via cargo-fuzz) for FUZZ_SECONDS. libFuzzer needs
## -Zsanitizer, which RUSTC_BOOTSTRAP=1 allows on the stable toolchain.
FUZZ_SECONDS ?= 30
fuzz:
	@command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install cargo-fuzz
	RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=crates/fuzz/target $(CARGO) fuzz run --fuzz-dir crates/fuzz frame_decode -- -max_total_time=$(FUZZ_SECONDS)

## Builds the API docs of every crate (warnings are errors).
doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps

## Builds the book (docs/) and checks its links.
## The book (docs/, mdBook from crates.io, installed under $(TARGET_DIR)/tools
## on first use) into docs/book, then every relative link and anchor checked.
## The configuration reference is checked against crates/config by check-deploy.
MDBOOK_VERSION ?= 0.5.4
MDBOOK := $(TARGET_DIR)/tools/bin/mdbook
docs: $(MDBOOK)
	$(MDBOOK) build docs
	python3 docs/check_links.py

## Installs mdBook (for make docs) under $(TARGET_DIR)/tools.
mdbook: $(MDBOOK)

# Unoptimized: it compiles in a third of the CPU time (63 s against 178 s,
# while CI's first build competes for the cores), and renders the book in
# under a second anyway.
$(MDBOOK):
	CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
		$(CARGO) install --locked mdbook --version $(MDBOOK_VERSION) --no-default-features --features search --root $(TARGET_DIR)/tools

## Removes build output and the local ensemble's data.
clean:
	$(CARGO) clean
	rm -rf $(RUN_DIR)
