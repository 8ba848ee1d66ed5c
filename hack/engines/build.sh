#!/usr/bin/env bash
# Builds the query engines of the engines test tier from the Go module proxy and caches them
# outside the repository, keyed by version (like hack/envtest/build.sh):
#
#   ~/.cache/gpu-node-guard/engines/prometheus/<PROM3_VERSION>/{prometheus,promtool}
#   ~/.cache/gpu-node-guard/engines/thanos/<THANOS_VERSION>/thanos
#
#   hack/engines/build.sh [prometheus|thanos|all]   build (or reuse); default all
#   hack/engines/build.sh --print-path prometheus   print only the directory of that engine
#
# Prometheus 2 (Debian `prometheus`) and VictoriaMetrics (Debian `victoria-metrics`) come from
# apt, not from here. Environment: PROM3_VERSION (module version, default v0.316.0 = release
# 3.16.0), THANOS_VERSION (default v0.42.4), XDG_CACHE_HOME, GO, ENGINES_GOSUMDB (GOSUMDB for
# these builds only; default: Go's own), CI (true: a missing Go toolchain is an error, not a skip).
set -euo pipefail

PROM3_VERSION="${PROM3_VERSION:-v0.316.0}"
THANOS_VERSION="${THANOS_VERSION:-v0.42.4}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-node-guard/engines"

die() { echo "engines: $*" >&2; exit 1; }
say() { echo "engines: $*" >&2; }

cache_dir() {
  case "$1" in
    prometheus) echo "$CACHE_ROOT/prometheus/$PROM3_VERSION" ;;
    thanos) echo "$CACHE_ROOT/thanos/$THANOS_VERSION" ;;
    *) die "unknown engine '$1' (prometheus or thanos)" ;;
  esac
}

# Module v0.316.0 is release 3.16.0: Prometheus tags its Go module v0.<major><minor>.<patch>.
prom3_release() {
  local v=${PROM3_VERSION#v0.}
  local mm=${v%%.*} patch=${v#*.}
  echo "$((mm / 100)).$((mm % 100)).${patch}"
}

# A cached binary counts only if it reports the version asked for and this script's branch
# stamp (both set by -ldflags), so a build made differently before is rebuilt.
BRANCH=module-proxy
is_current() { [[ -x "$1" ]] && "$1" --version 2>&1 | grep -qF "version $2 (branch: $BRANCH,"; }

# Outside CI the tests skip an engine that is not built, with one line; CI must build it.
have_go() {
  [[ -x "$GO" ]] && return 0
  [[ "${CI:-}" == true ]] && die "go not found: install Go >= 1.26 or set GO=/path/to/go"
  say "go not found: $1 not built; its tests will be skipped (install Go >= 1.26 to build it)"
  return 1
}

go_env() {
  local sumdb=()
  if [[ -n "${ENGINES_GOSUMDB:-}" ]]; then sumdb=("GOSUMDB=$ENGINES_GOSUMDB"); fi
  env GOTOOLCHAIN=local CGO_ENABLED=0 "${sumdb[@]}" GOFLAGS="${GOFLAGS:-} -mod=mod" "$GO" "$@"
}

build_prometheus() {
  local dir release stamp
  dir="$(cache_dir prometheus)"
  release="$(prom3_release)"
  stamp="-s -w -X github.com/prometheus/common/version.Version=${release}"
  stamp+=" -X github.com/prometheus/common/version.Branch=${BRANCH}"
  stamp+=" -X github.com/prometheus/common/version.Revision=${PROM3_VERSION}"
  if is_current "$dir/prometheus" "$release" && is_current "$dir/promtool" "$release"; then
    say "prometheus $release cached in $dir"
    return
  fi
  have_go "Prometheus $release" || return 0
  mkdir -p "$dir"
  say "building prometheus + promtool $release ($PROM3_VERSION; first build: minutes)"
  local start=$SECONDS
  # Both commands are main packages of a module without replace directives: `go install` works.
  # remove_all_sd (Prometheus' own build tag, plugins/) leaves out every service discovery but
  # file and HTTP: the tests give static targets and rule files, and the cloud SDKs (AWS, Azure,
  # GCE, Kubernetes client-go...) are 59% of the Go source the two commands compile (135 → 56 MB).
  # The stamp is unchanged: a binary cached with every SD answers the tests the same.
  GOBIN="$dir" go_env install -trimpath -tags remove_all_sd -ldflags "$stamp" \
    "github.com/prometheus/prometheus/cmd/prometheus@${PROM3_VERSION}" \
    "github.com/prometheus/prometheus/cmd/promtool@${PROM3_VERSION}"
  say "built prometheus + promtool $release in $((SECONDS - start)) s into $dir"
}

# Every replace directive of Thanos's own go.mod, as `go mod edit` flags.
thanos_replaces() {
  local gomod
  gomod="$(go_env mod download -json "github.com/thanos-io/thanos@${THANOS_VERSION}" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$gomod" ]] || die "cannot read go.mod of github.com/thanos-io/thanos@${THANOS_VERSION}"
  awk '/^replace \($/ {inside=1; next}
       inside && /^\)/ {inside=0; next}
       inside && $2 == "=>" && NF == 4 {printf "-replace=%s=%s@%s\n", $1, $3, $4}
       /^replace [^(]/ && $3 == "=>" && NF == 5 {printf "-replace=%s=%s@%s\n", $2, $4, $5}' "$gomod"
}

build_thanos() {
  local dir start replaces stamp
  dir="$(cache_dir thanos)"
  if is_current "$dir/thanos" "${THANOS_VERSION#v}"; then
    say "thanos ${THANOS_VERSION#v} cached in $dir"
    return
  fi
  have_go "Thanos ${THANOS_VERSION}" || return 0
  mkdir -p "$dir"
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
  cp "$HERE/thanos/go.mod" "$WORK/"
  say "building thanos ${THANOS_VERSION} (first build: many minutes)"
  start=$SECONDS
  stamp="-s -w -X github.com/prometheus/common/version.Version=${THANOS_VERSION#v}"
  stamp+=" -X github.com/prometheus/common/version.Branch=${BRANCH}"
  stamp+=" -X github.com/prometheus/common/version.Revision=${THANOS_VERSION}"
  (
    cd "$WORK"
    replaces="$(thanos_replaces)"
    [[ -n "$replaces" ]] || die "no replace directives found in thanos ${THANOS_VERSION}"
    # shellcheck disable=SC2086 # one flag per line, no spaces inside
    go_env mod edit "-require=github.com/thanos-io/thanos@${THANOS_VERSION}" $replaces
    go_env mod tidy
    # slicelabels as in Thanos's .promu.yml: its gRPC code casts labels to slices, and the
    # default (stringlabels) build panics in the sidecar (makeslice: len out of range).
    go_env build -trimpath -tags netgo,slicelabels -ldflags "$stamp" -o "$dir/thanos.tmp" \
      github.com/thanos-io/thanos/cmd/thanos
  )
  mv "$dir/thanos.tmp" "$dir/thanos"
  say "built thanos ${THANOS_VERSION} in $((SECONDS - start)) s into $dir"
}

main() {
  case "${1:-all}" in
    --print-path) cache_dir "${2:?--print-path needs an engine name}"; return ;;
    prometheus | thanos | all) ;;
    *) die "unknown argument '$1' (prometheus, thanos, all or --print-path NAME)" ;;
  esac
  [[ "$PROM3_VERSION" =~ ^v0\.[0-9]{3}\.[0-9]+$ ]] || die "PROM3_VERSION must look like v0.316.0"
  [[ "$THANOS_VERSION" =~ ^v0\.[0-9]+\.[0-9]+$ ]] || die "THANOS_VERSION must look like v0.42.4"
  GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
  mkdir -p "$CACHE_ROOT"
  if command -v flock >/dev/null; then exec 9>"$CACHE_ROOT/.lock" && flock 9; fi
  case "${1:-all}" in
    prometheus) build_prometheus ;;
    thanos) build_thanos ;;
    all) build_prometheus; build_thanos ;;
  esac
}

main "$@"
