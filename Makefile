# zabkeeper: one target per task; CI (.ci/run) calls the same targets.
CARGO ?= cargo
NODES ?= 3
RUN_DIR ?= run

.PHONY: build test fmt fmt-check lint bench fuzz run stop check-purity doc clean

build:
	$(CARGO) build --release --bins

## Runs every test: unit, property, simulation and integration (real processes on loopback).
test:
	$(CARGO) test --all-targets

fmt:
	$(CARGO) fmt

fmt-check:
	$(CARGO) fmt --check

## clippy with warnings as errors, plus the purity rule of the deterministic core.
lint: check-purity
	$(CARGO) clippy --all-targets -- -D warnings

## The pure modules never touch tokio, clocks, ambient randomness, files or sockets.
check-purity:
	@bad=$$(grep -rnE 'tokio|Instant::now|SystemTime|thread_rng|rand::rng\(|std::fs|std::net::Tcp|std::thread' \
		src/zab src/tree src/session src/txn src/op.rs 2>/dev/null | grep -v '^\s*//' || true); \
	if [ -n "$$bad" ]; then echo "purity violation in a pure module:"; echo "$$bad"; exit 1; fi; \
	echo "check-purity: ok"

bench:
	$(CARGO) bench --bench core

## Fuzzes the wire decoders (libFuzzer via cargo-fuzz) for FUZZ_SECONDS. libFuzzer needs
## -Zsanitizer, which RUSTC_BOOTSTRAP=1 allows on the stable toolchain.
FUZZ_SECONDS ?= 30
fuzz:
	@command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install cargo-fuzz
	RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=fuzz/target $(CARGO) fuzz run frame_decode -- -max_total_time=$(FUZZ_SECONDS)

doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps

clean:
	$(CARGO) clean
	rm -rf $(RUN_DIR)
