#!/usr/bin/env bash
# Tools the deploy tests (tests/apiserver/test_deploy.py) use besides kubectl, from the Go module
# proxy, cached outside the repository:
#   - kustomize, the CLI ArgoCD runs (`kustomize edit set image`, then `kustomize build`);
#   - the prometheus-operator CRDs of PrometheusRule and PodMonitor, so the components are
#     applied against the schema kube-prometheus-stack installs.
#
#   hack/deploytest/build.sh                   build (or reuse) both
#   hack/deploytest/build.sh --print-kustomize the kustomize binary (exit 1 when not built yet)
#   hack/deploytest/build.sh --print-crds      the directory holding the two CRDs (same)
#
# Environment: KUSTOMIZE_VERSION (default v5.7.1, the kustomize kubectl v1.34 embeds),
# PROMETHEUS_OPERATOR_VERSION (default v0.85.0), XDG_CACHE_HOME, GO.
set -euo pipefail

KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-v5.7.1}"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-node-guard"
KUSTOMIZE_DIR="$CACHE/kustomize/$KUSTOMIZE_VERSION"
CRD_DIR="$CACHE/prometheus-operator-crds/$PROMETHEUS_OPERATOR_VERSION"
CRDS=(monitoring.coreos.com_prometheusrules.yaml monitoring.coreos.com_podmonitors.yaml)
# sum.golang.org is not reachable from the build machines (as for hack/envtest): the module
# hashes of the default versions are pinned here instead, as first downloaded from the proxy.
declare -A PINNED=(
  ["sigs.k8s.io/kustomize/kustomize/v5@v5.7.1"]="h1:sYJsarwy/SDJfjjLMUqwFDGPwzUtMOQ1i1Ed49+XSbw="
  ["github.com/prometheus-operator/prometheus-operator@v0.85.0"]="h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s="
)

die() { echo "deploytest: $*" >&2; exit 1; }
say() { echo "deploytest: $*" >&2; }

go_env() { GOTOOLCHAIN=local CGO_ENABLED=0 GOSUMDB=off GOFLAGS=-mod=mod "$GO" "$@"; }

# Downloads MODULE@VERSION, checks its pinned hash (when one is pinned) and prints its directory.
module_dir() {
  local answer sum dir
  answer="$(cd "$SCRATCH" && go_env mod download -json "$1")" || die "cannot download $1"
  sum="$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",\{0,1\}$/\1/p' <<<"$answer")"
  dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$answer")"
  if [[ -n "${PINNED[$1]:-}" && "$sum" != "${PINNED[$1]}" ]]; then
    die "$1 has hash $sum, pinned ${PINNED[$1]}"
  fi
  echo "$dir"
}

build_kustomize() {
  if "$KUSTOMIZE_DIR/kustomize" version 2>/dev/null | grep -qF "$KUSTOMIZE_VERSION"; then return; fi
  local start=$SECONDS
  module_dir "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" >/dev/null
  mkdir -p "$KUSTOMIZE_DIR"
  # The module's own go.sum pins every dependency.
  (cd "$SCRATCH" && GOBIN="$KUSTOMIZE_DIR" go_env install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=$KUSTOMIZE_VERSION" \
    "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION")
  say "built kustomize $KUSTOMIZE_VERSION in $((SECONDS - start)) s"
}

fetch_crds() {
  local dir name
  if [[ -f "$CRD_DIR/${CRDS[0]}" && -f "$CRD_DIR/${CRDS[1]}" ]]; then return; fi
  dir="$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")"
  mkdir -p "$CRD_DIR"
  for name in "${CRDS[@]}"; do
    install -m 0644 "$dir/example/prometheus-operator-crd/$name" "$CRD_DIR/$name"
  done
  say "prometheus-operator $PROMETHEUS_OPERATOR_VERSION CRDs in $CRD_DIR"
}

main() {
  case "${1:-}" in
    --print-kustomize)
      [[ -x "$KUSTOMIZE_DIR/kustomize" ]] || die "no kustomize yet: run hack/deploytest/build.sh"
      echo "$KUSTOMIZE_DIR/kustomize"
      return
      ;;
    --print-crds)
      [[ -f "$CRD_DIR/${CRDS[0]}" ]] || die "no CRDs yet: run hack/deploytest/build.sh"
      echo "$CRD_DIR"
      return
      ;;
    "") ;;
    *) die "unknown argument '$1' (use --print-kustomize or --print-crds)" ;;
  esac
  GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
  [[ -x "$GO" ]] || die "go not found: install Go >= 1.24 or set GO=/path/to/go"
  SCRATCH="$(mktemp -d)"
  trap 'rm -rf "$SCRATCH"' EXIT
  build_kustomize
  fetch_crds
  say "kustomize $("$KUSTOMIZE_DIR/kustomize" version) and the CRDs ready"
}

main "$@"
