#!/usr/bin/env bash
# docs/quickstart.md as a test (run by `make test` after the e2e suites, on the cluster they
# used): every shell block of the page runs in order, as written, from the repository's root,
# on a cluster brought back to what a new user has (no operator release, no persona roles, no
# my-app namespace). The only difference from a user's cluster: registry.example.com is served
# by the machine's registry (e2e/real-node.sh), which holds the image `make image` built as
# valkey-operator:<version>. A block marked `skip` is not run and says why; the cert-manager
# version the page pins must be the one the local cluster runs.
# Afterwards the local install is put back (`e2e/cluster.sh up`).
# Prints one line per block and a closing "N passed, N failed" line.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
LC_DIR=${LC_DIR:-$REPO/.localcluster}
source "$REPO/e2e/versions.env"
CACHE=${VALKEY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/valkey-operator}
export KUBECONFIG=$LC_DIR/kubeconfig
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
passed=0; failed=0
ok() { echo "ok   - $*"; passed=$((passed + 1)); }
fail() { echo "FAIL - $*"; failed=$((failed + 1)); }

# What a user has on the PATH: kubectl, helm and the plugin (docs/plugin.md#install; built here
# into the target directory instead of `cargo install`).
(cd "$REPO" && cargo build --quiet --workspace --features valkey-operator/e2e,valkey-e2e/e2e --bin kubectl-valkey) || { echo "FAIL - building kubectl-valkey"; exit 1; }
export PATH=$CARGO_TARGET_DIR/debug:$CACHE/k8s-v$K8S_VERSION/bin:$CACHE/helm-v$HELM_VERSION/bin:$PATH

work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
count=$(python3 "$REPO/e2e/quickstart/blocks.py" "$REPO/docs/quickstart.md" "$work") || exit 1

grep -q -- "--version v$CERT_MANAGER_VERSION" "$work"/*.sh \
  && ok "docs/quickstart.md pins cert-manager v$CERT_MANAGER_VERSION, the version the local cluster runs" \
  || fail "docs/quickstart.md does not pin cert-manager v$CERT_MANAGER_VERSION (e2e/versions.env)"

# A new user's cluster: nothing of ours but the CRDs' objects the suites left (none).
# my-app goes first, while the operator still runs: the sample cluster an earlier suite left
# there (provisioning's) holds finalizers only the operator removes.
echo "[quickstart] removing the local install: namespace my-app, helm release, persona roles"
kubectl delete namespace my-app --ignore-not-found --wait --timeout=180s >/dev/null
helm uninstall valkey-operator -n valkey-operator-system --wait >/dev/null 2>&1 || true
kubectl delete -f "$REPO/manifests/rbac/platform-team.yaml" -f "$REPO/manifests/rbac/product-team.yaml" \
  --ignore-not-found >/dev/null

# Each block in a shell of its own, from the repository's root, as a user pastes it.
run_block() { (cd "$REPO" && bash -euo pipefail "$1") > "$2" 2>&1; }
for i in $(seq -f %02g "$count"); do
  how=$(cat "$work/$i.how"); first=$(head -1 "$work/$i.sh")
  case $how in
    skip:*) echo "skip - block $i ($first): ${how#skip: }" ;;
    "fails with: "*)
      # Right after the install the API server may not trust the webhook yet (cert-manager's
      # cainjector hands it the CA within seconds): asked again for a minute.
      want=${how#fails with: }; said=""
      for _ in $(seq 30); do
        run_block "$work/$i.sh" "$work/$i.out" && { said="succeeded"; break; }
        said=$(cat "$work/$i.out"); grep -qF -- "$want" "$work/$i.out" && break; sleep 2
      done
      if grep -qF -- "$want" "$work/$i.out" && [ "$said" != succeeded ]; then ok "block $i ($first) is refused: $(grep -F -- "$want" "$work/$i.out" | head -1)"
      else fail "block $i ($first) should fail with '$want'; it said: $said"; fi ;;
    *)
      if run_block "$work/$i.sh" "$work/$i.out"; then
        want=${how#prints: }
        if [ "$how" = run ] || grep -qF -- "$want" "$work/$i.out"; then ok "block $i ($first)"
        else fail "block $i ($first) did not print '$want':"; sed 's/^/    /' "$work/$i.out"; fi
      else
        fail "block $i ($first):"; sed 's/^/    /' "$work/$i.out"
      fi ;;
  esac
done

# Back to the local install for what follows (the launcher test): the sample cluster goes
# while its operator still runs (its finalizer), then the release the page installed.
echo "[quickstart] putting the local install back"
kubectl -n my-app delete valkeycluster my-cluster --ignore-not-found --wait --timeout=180s >/dev/null
helm uninstall valkey-operator -n valkey-operator-system --wait >/dev/null 2>&1 || true
LC_SAMPLES=menu bash "$REPO/e2e/cluster.sh" up > "$work/up.log" 2>&1 \
  && ok "the local install is back" || { fail "e2e/cluster.sh up after the quickstart:"; tail -20 "$work/up.log"; }

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
