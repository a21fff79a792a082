# valkey-operator: the commands the README documents. Build caches live outside the checkout
# (cargo target, Go caches and tools under ~/.cache/valkey-operator), so a fresh clone
# rebuilds nothing the machine already built.
SHELL := /bin/bash
CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/valkey-operator
export CARGO_TARGET_DIR ?= $(CACHE)/target
# Incremental caches are per checkout path: every fresh clone would add gigabytes of them
# to the shared target dir for no gain (cargo used directly while developing keeps them).
export CARGO_INCREMENTAL ?= 0
export LC_DIR ?= $(CURDIR)/.localcluster
export KUBECONFIG := $(LC_DIR)/kubeconfig
K8S_VERSION := $(shell . e2e/versions.env && echo $$K8S_VERSION)
export PATH := $(CACHE)/k8s-v$(K8S_VERSION)/bin:$(HOME)/.cargo/bin:/usr/local/go/bin:$(PATH)
# e2e tests share one cluster on a 2-core machine: a few at a time.
E2E_THREADS ?= 3

.PHONY: up down status tools test unit e2e crds manifests chart-test lint deny bench chaos image bench-backup release quickstart-test

## up: build what is missing, start the local Kubernetes, install CRDs, RBAC, operator, samples
up:
	bash e2e/cluster.sh up

## down: stop everything the local cluster started; no namespaces, links or processes left
down:
	bash e2e/cluster.sh down

status:
	bash e2e/cluster.sh status

## tools: everything `up` needs, and the test tools (promtool)
tools:
	bash e2e/tools/install.sh --test-tools

## test: the whole suite (lint, unit, real-Valkey driver tests, chart checks, the image, then e2e on a fresh local cluster)
## The cluster gets the sample menu but not the sample clusters: the suites need that room on 2-CPU nodes.
test: tools lint unit chart-test image
	bash e2e/cluster.sh down
	set -o pipefail; trap 'bash e2e/cluster.sh down' EXIT; \
	  LC_SAMPLES=menu bash e2e/cluster.sh up && $(MAKE) --no-print-directory e2e && bash e2e/quickstart-test.sh && bash e2e/launcher-test.sh

## unit: pure unit tests, CRD drift test, driver tests against real valkey-server processes
unit:
	cargo test --workspace

## e2e: end-to-end suites against the running local cluster (make up first)
e2e:
	cargo test --workspace --features valkey-operator/e2e,valkey-e2e/e2e \
	  --test api_e2e --test kubelet --test provisioning --test webhook --test kubectl --test tenancy --test compat --test acl --test rollout --test scaling --test failures --test data_safety --test plugin --test operability --test networking --test cert_manager --test tls --test member_start --test blocked --test webhook_flood --test real_node --test scheduling --test durability --test autoscaling --test creation --test metering --test backup --test restore --test metrics --test clients \
	  -- --test-threads=$(E2E_THREADS)
	@# Node stops, pauses and drains last: they disturb every pod on the node; leader freezes
	@# the operator itself; traces restarts it.
	cargo test --workspace --features valkey-operator/e2e,valkey-e2e/e2e --test conversion --test drain --test lost_members --test rollout_limit --test kubelet_faults --test leader --test lockout --test tenant_pods --test traces --test backup_faults --test watch_namespaces --test external_access -- --test-threads=1

## bench-backup: a 1 GiB shard's backup next to valkey-cli --rdb + S3 PUT, and its restore next
## to S3 GET + valkey-server loading the file (throughput ratios, each process's peak RSS); host
## processes, release build, no local cluster
bench-backup:
	bash e2e/bench-backup.sh

## quickstart-test: docs/quickstart.md's commands as written, on the running local cluster (make up first)
quickstart-test:
	bash e2e/quickstart-test.sh

## chart-test: lint and render checks of charts/valkey-operator, plain-manifest drift
chart-test:
	bash e2e/chart-test.sh

## manifests: render the plain manifests (manifests/rbac, manifests/install, webhooks/) from the chart
manifests:
	bash e2e/render-manifests.sh

## image: the operator image as an OCI archive (static release build, buildah, no daemon),
## checked by running its entrypoint's `--version` from the unpacked image
image:
	bash e2e/image.sh

## release: every release artifact into $(CARGO_TARGET_DIR)/release-artifacts/<version> (the
## image with its SBOM and crate licenses, the packaged chart, the static plugin with its krew
## manifest, release notes from CHANGELOG.md), then checked; RELEASE_CHART_REPO=oci://... also
## pushes the chart (see README: publishing a release)
release:
	bash e2e/release.sh

## crds: regenerate crds/ from the Rust types
crds:
	rm -f crds/*.yaml charts/valkey-operator/files/crds/*.yaml
	cargo run --quiet --bin valkey-operator -- crd --out-dir crds
	cp crds/*.yaml charts/valkey-operator/files/crds/

## lint: rustfmt and clippy (warnings are errors), the e2e suites included; no function in
## src/ over 80 lines, none in e2e/ over 120; then deny
lint:
	cargo fmt --all --check
	python3 e2e/long-functions.py src 80
	python3 e2e/long-functions.py e2e 120
	python3 e2e/import-cycles.py src
	python3 e2e/import-cycles.py --expect orders.rs,store/ledger.rs e2e/fixtures/import-cycle/src
	cargo clippy --workspace --all-targets --features valkey-operator/e2e,valkey-e2e/e2e -- -D warnings
	@$(MAKE) --no-print-directory deny

# cargo-deny from crates.io, built on first use (about 3 minutes, once per machine), in a
# throwaway target dir rather than the shared one.
CARGO_DENY_VERSION := 0.20.2

## deny: licenses, bans (duplicate crates warn) and sources of the dependency tree (deny.toml).
## Advisories are not checked: their database is a GitHub repository, not reachable here.
deny:
	@command -v cargo-deny >/dev/null || env -u CARGO_TARGET_DIR cargo install --locked --quiet --version $(CARGO_DENY_VERSION) cargo-deny
	cargo deny --locked --workspace check --hide-inclusion-graph licenses bans sources

## bench: figures, not tests, on release builds (the local cluster must be up: make up, which
## runs the release operator); writes docs/benchmarks.md, its plots and figures.json
bench:
	cargo run --release --quiet -p valkey-e2e --bin vk-bench -- --runs 3

## chaos: every e2e suite one at a time, with the long fault-injection suites and the 1 GiB
## backup (e2e/tests/backup_large.rs); needs make up
chaos:
	cargo test --workspace --features valkey-operator/e2e,valkey-e2e/e2e,valkey-e2e/chaos --test '*' -- --test-threads=1
