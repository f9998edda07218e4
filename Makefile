# Two entry points for a fresh machine (README): `make up` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test lint bytecode architecture unit integration cluster-tests k8s-tools rocketmq-client rocketmq-servers s3-server cluster cluster-down bench-quick image audit-image image-rocketmq image-smoke e2e e2e-audit e2e-down clean

# The broker's compiled kernels (broker-image/native, Rust through maturin from PyPI and
# crates.io) where a Rust toolchain is (on PATH or rustup's ~/.cargo/bin); without one the
# broker runs their Python references (brokergroup_broker/kernels.py).
CARGO_PATH := $(HOME)/.cargo/bin:$(PATH)
NATIVE_SOURCES := $(addprefix broker-image/native/,Cargo.toml Cargo.lock pyproject.toml src/lib.rs)

$(STAMP): pyproject.toml $(NATIVE_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[all,test]'
	@if env PATH="$(CARGO_PATH)" sh -c 'command -v cargo' >/dev/null 2>&1; then \
		PATH="$(CARGO_PATH)" $(BIN)/pip install -q ./broker-image/native; \
	else echo "native kernels: no Rust toolchain (cargo); the broker runs the Python references"; fi
	touch $(STAMP)

venv: $(STAMP)

# The main job: a whole installation on this machine, no Kubernetes.
up: $(STAMP)
	$(BIN)/brokergroup local up

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# docs/architecture.svg (and .dot) from the code's imports (tools/architecture/draw.py; needs
# graphviz's dot and tred: apt-get install graphviz).
architecture: $(STAMP)
	$(BIN)/python tools/architecture/draw.py

# pytest-xdist workers: one per core (WORKERS=0: one process, no xdist). Each worker has a
# network namespace of its own where it can (root), so real-process tests run side by side
# on their fixed addresses; tests/conftest.py, docs/development.md "Parallel tiers".
# A worker that dies (a native crash) is not replaced: under loadgroup xdist 3.8 requeues the
# dead worker's finished groups as empty units and the session can wait for ever at ~97 %
# (pytest-xdist #1378; our CI rehearsal at ed45c58 hung so). Without a restart the run ends
# at once, naming the test ("worker 'gwN' crashed while running ...").
WORKERS ?= auto
XDIST := -n $(WORKERS) --dist loadgroup --max-worker-restart=0

# The checkout's bytecode, written once before a tier: the tiers start thousands of Python
# processes from this checkout (brokers, controllers, pods, CLIs), and where
# PYTHONDONTWRITEBYTECODE is set (as on CI's machines) each of them would compile every module
# it imports from source again (~1 s of CPU on a slow 2-core machine for the whole project).
# compileall writes regardless of that variable; 2-8 s.
BYTECODE_DIRS := controller broker-image remoting operator cli pipeline tests tools bench
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 -x '/(native|\.venv)/' $(BYTECODE_DIRS) >/dev/null

unit: bytecode
	$(BIN)/pytest -q $(XDIST) tests/unit

integration: bytecode
	$(BIN)/pytest -q $(XDIST) tests/integration

# Kubernetes binaries for the cluster tier, built from the Go module proxy into a cache
# outside the repository (tools/k8s/build.sh; cold ~10 min on 2 cores, warm seconds).
# Without Go the cluster tier skips with that reason.
k8s-tools:
	@if command -v go >/dev/null 2>&1; then tools/k8s/build.sh; \
	else echo "k8s-tools: Go is not installed; the cluster tier will skip"; fi

# The stock RocketMQ 5.3.1 client (Maven Central, cached outside the repository by
# tools/rocketmq/fetch.sh; warm: milliseconds) for the golden-frame re-recording test.
# Without Java/Maven or a reachable Maven Central that test skips with the reason.
rocketmq-client:
	@tools/rocketmq/fetch.sh >/dev/null || echo "rocketmq-client: not fetched; tests needing the stock client will skip"

# Stock RocketMQ 5.3.3 servers (broker, name server, DLedger controller, mqadmin) beside the
# client, for the tiers and benchmarks that run real RocketMQ brokers; same cache.
rocketmq-servers:
	@tools/rocketmq/fetch.sh server >/dev/null || echo "rocketmq-servers: not fetched; tests needing stock RocketMQ brokers will skip"

# An S3-compatible server (versitygw, `go install` from the Go module proxy into
# ~/.cache/brokergroup/s3; tools/s3/build.sh) for the audit's object-store test.
# Without Go that test skips with the reason.
s3-server:
	@tools/s3/build.sh >/dev/null || echo "s3-server: not built; the audit's object-store test will skip"

cluster-tests: bytecode k8s-tools
	$(BIN)/pytest -q $(XDIST) tests/cluster

# A real API server + process kubelet for trying `kubectl apply -f crds/` by hand.
cluster: $(STAMP) k8s-tools
	$(BIN)/python -m tests.cluster.tier up

cluster-down: $(STAMP)
	$(BIN)/python -m tests.cluster.tier down

# The whole test suite: lint, types, layers, then every tier that can run here
# (unit, integration, chaos, pipeline and the cluster tier on a real kube-apiserver), in
# parallel on $(WORKERS) workers.
test: lint bytecode k8s-tools rocketmq-client rocketmq-servers s3-server
	$(BIN)/pytest -q -p no:cacheprovider --durations=25 $(XDIST) tests

# The project image (broker-image/Dockerfile) where a container engine answers;
# OFFLINE_BASE=1 builds its Debian base here (no registry). tools/image/.
image: $(STAMP)
	PYTHON=$(BIN)/python tools/image/build.sh

# The audit image (broker-image/audit/): brokergroup[audit] and a Java 17 runtime, for
# spark-submit --master k8s://… (docs/audit.md "Kubernetes"); OFFLINE_BASE=1 as above.
audit-image: $(STAMP)
	AUDIT=1 PYTHON=$(BIN)/python tools/image/build.sh

# Stock RocketMQ brokers for spec.engine rocketmq: Maven Central jars (rocketmq-servers) on
# Debian's headless JRE 17, the base built offline with debootstrap. tools/rocketmq/image.sh.
image-rocketmq:
	tools/rocketmq/image.sh

# The built image runs a whole group read-only, non-root; every key read back.
image-smoke:
	tools/image/smoke.sh

# The kind e2e tier (tests/e2e, tools/kind/e2e.sh): engine, kind cluster (kind's standard
# node image where a registry answers, else one built offline), the project image loaded,
# then the operator scenarios with the real chart. Skips with the reason when no engine can
# start. The cluster stays up for debugging until `make e2e-down` (which CI always runs).
e2e: $(STAMP)
	PYTHON=$(CURDIR)/$(BIN)/python PYTEST=$(CURDIR)/$(BIN)/pytest tools/kind/e2e.sh $(PYTEST_ARGS)

# The same with the audit on Kubernetes (tests/e2e/test_audit_k8s.py: the audit image built
# and loaded, spark-submit --master k8s://); about 15 min more, so not in CI's `make e2e`.
e2e-audit: $(STAMP)
	E2E_AUDIT=1 PYTHON=$(CURDIR)/$(BIN)/python PYTEST=$(CURDIR)/$(BIN)/pytest tools/kind/e2e.sh $(PYTEST_ARGS)

e2e-down:
	tools/kind/down.sh

bench-quick: $(STAMP)
	$(BIN)/python bench/controller.py --quick

clean:
	rm -rf $(VENV)
