#!/usr/bin/env bash
# Builds kube-apiserver and etcd for the apiserver test tier from the Go module proxy and caches
# them outside the repository, keyed by Kubernetes version.
#
#   hack/envtest/build.sh                   build (or reuse) and report the directory on stderr
#   hack/envtest/build.sh --print-path      print only the directory holding both binaries
#   hack/envtest/build.sh --update-modules  build, then write the resolved go.mod/go.sum back
#                                           into hack/envtest/{kube,etcd}/ (and kubectl/ with
#                                           --kubectl)
#   hack/envtest/build.sh --kubectl         also build (or reuse) kubectl of the same version
#   hack/envtest/build.sh --controller-manager  also build (or reuse) kube-controller-manager
#                                           (the Job controller, for Pod ownership and adoption)
#   hack/envtest/build.sh --scheduler       also build (or reuse) kube-scheduler (the DRA tier:
#                                           ResourceClaim allocation)
#   hack/envtest/build.sh --kubelet         also build (or reuse) the kubelet (the node tier:
#                                           tests/node runs the guard's Jobs on a real node)
#   hack/envtest/build.sh --print-kubectl   print only the path of that kubectl (nothing is built;
#                                           exit 1 when it is not there yet)
#
# Environment: ENVTEST_VERSION (default v1.34.4), ETCD_VERSION (default v3.6.16),
# KUBEBUILDER_ASSETS (a directory that already holds kube-apiserver and etcd: nothing is built),
# XDG_CACHE_HOME, GO (the go command), ENVTEST_GOSUMDB (default off, see docs/deploy.md),
# ENVTEST_GOTOOLCHAIN (default local; go1.27.3 when a release needs a newer Go than the machine's).
set -euo pipefail

ENVTEST_VERSION="${ENVTEST_VERSION:-v1.34.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-node-guard/envtest/${ENVTEST_VERSION}"

die() { echo "envtest: $*" >&2; exit 1; }
say() { echo "envtest: $*" >&2; }

has_bins() { [[ -x "$1/kube-apiserver" && -x "$1/etcd" ]]; }

# KUBEBUILDER_ASSETS wins when it holds both binaries, as in controller-runtime's envtest.
assets_dir() {
  if [[ -n "${KUBEBUILDER_ASSETS:-}" ]] && has_bins "${KUBEBUILDER_ASSETS}"; then
    echo "${KUBEBUILDER_ASSETS}"
  else
    echo "${CACHE_DIR}"
  fi
}

# The cached binary counts only if it reports the version asked for (stamped by -ldflags).
# Arguments after the wanted text ask for the version (default --version). The answer is read
# whole first: `grep -q` in a pipe may close it early, and pipefail then reports the binary's
# SIGPIPE as "not current" (a needless rebuild of etcd, which prints four lines).
is_current() {
  local bin=$1 want=$2 answer
  shift 2
  [[ -x "$bin" ]] || return 1
  answer="$("$bin" "${@:---version}" 2>/dev/null)" || return 1
  grep -qF "$want" <<<"$answer"
}

go_env() {
  # GOSUMDB: sum.golang.org may be unreachable from build machines; the committed go.sum files
  # still pin every module hash of the default versions (go verifies against go.sum first).
  GOTOOLCHAIN="${ENVTEST_GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOSUMDB="${ENVTEST_GOSUMDB:-off}" \
    GOFLAGS="${GOFLAGS:-} -mod=mod" "$GO" "$@"
}

# Every k8s.io/* module that k8s.io/kubernetes requires at the placeholder v0.0.0 is a staging
# module; its published twin is v0.<minor>.<patch> (k8s issue #79384).
staging_replaces() {
  local gomod staging_version="v0.${ENVTEST_VERSION#v1.}"
  gomod="$(go_env mod download -json "k8s.io/kubernetes@${ENVTEST_VERSION}" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$gomod" ]] || die "cannot read go.mod of k8s.io/kubernetes@${ENVTEST_VERSION}"
  grep -E '^[[:space:]]+k8s\.io/[a-z0-9-]+ v0\.0\.0$' "$gomod" |
    awk -v v="$staging_version" '{printf "-replace=%s=%s@%s\n", $1, $1, v}'
}

# The directory under hack/envtest/ of each binary's wrapper module.
module_of() {
  case "$1" in
    kube-apiserver | kube-controller-manager | kube-scheduler | kubelet) echo kube ;;
    *) echo "$1" ;;
  esac
}

copy_module() {
  cp "$HERE/$1/go.mod" "$2/"
  if [[ -f "$HERE/$1/go.sum" ]]; then cp "$HERE/$1/go.sum" "$2/"; fi
}

# Runs inside the scratch module directory; $1 is the command to build (its tool line keeps its
# dependencies through `go mod tidy`: the kubelet needs many the wrapper's own tool does not).
prepare_kube_module() {
  local drops replaces cmd=$1
  # Drop the committed replace block so a different ENVTEST_VERSION gets a clean one.
  drops="$(go_env mod edit -print |
    awk '($1 ~ /^k8s\.io\// && $2 == "=>") {print "-dropreplace=" $1}
         ($1 == "replace" && $2 ~ /^k8s\.io\// && $3 == "=>") {print "-dropreplace=" $2}')"
  replaces="$(staging_replaces)"
  [[ -n "$replaces" ]] || die "no staging modules found in k8s.io/kubernetes@${ENVTEST_VERSION}"
  # shellcheck disable=SC2086 # one flag per line, no spaces inside
  go_env mod edit "-require=k8s.io/kubernetes@${ENVTEST_VERSION}" \
    "-tool=k8s.io/kubernetes/cmd/$cmd" $drops $replaces
  go_env mod tidy
}

# Without the stamp, `--version` and /version report a placeholder.
version_ldflags() {
  local minor=${ENVTEST_VERSION#v1.} ldflags="-s -w" pkg
  minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=${ENVTEST_VERSION} -X ${pkg}.gitMajor=1"
    ldflags+=" -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
  done
  echo "$ldflags"
}

# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet (all from kube/) and kubectl
# (kubectl/), the same staging replaces
# and the same version stamp.
build_kube_command() {
  local work=$1 cmd=$2
  copy_module "$(module_of "$cmd")" "$work"
  (
    cd "$work"
    prepare_kube_module "$cmd"
    go_env build -trimpath -ldflags "$(version_ldflags)" -o "$CACHE_DIR/$cmd.tmp" \
      "k8s.io/kubernetes/cmd/$cmd"
  )
  mv "$CACHE_DIR/$cmd.tmp" "$CACHE_DIR/$cmd"
}

build_etcd() {
  local work=$1  # $2: the name, always etcd
  copy_module etcd "$work"
  (
    cd "$work"
    go_env mod edit "-require=go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
    go_env mod tidy
    go_env build -trimpath -ldflags "-s -w" -o "$CACHE_DIR/etcd.tmp" go.etcd.io/etcd/server/v3
  )
  mv "$CACHE_DIR/etcd.tmp" "$CACHE_DIR/etcd"
}

# Runs one build step (`fn <scratch module directory> <name>`) and reports its wall time and size.
timed_build() {
  local name=$1 fn=$2 work="$SCRATCH/$1" start
  mkdir -p "$work"
  start=$SECONDS
  say "building $name (first build: minutes; later runs reuse ${CACHE_DIR})"
  "$fn" "$work" "$name"
  say "built $name in $((SECONDS - start)) s, $(du -m "$CACHE_DIR/$name" | cut -f1) MiB"
  if [[ "$UPDATE_MODULES" == 1 ]]; then
    cp "$work/go.mod" "$work/go.sum" "$HERE/$(module_of "$name")/"
  fi
}

# kubectl next to the other binaries: in KUBEBUILDER_ASSETS when it holds one, else the cache.
kubectl_path() {
  local dir
  dir="$(assets_dir)"
  if [[ -x "$dir/kubectl" ]]; then echo "$dir/kubectl"; else echo "$CACHE_DIR/kubectl"; fi
}

main() {
  UPDATE_MODULES=0 KUBECTL=0 KCM=0 SCHED=0 KUBELET=0
  for arg in "$@"; do
    case "$arg" in
      --print-path) assets_dir; return ;;
      --print-kubectl)
        [[ -x "$(kubectl_path)" ]] || die "no kubectl yet: run hack/envtest/build.sh --kubectl"
        kubectl_path
        return
        ;;
      --update-modules) UPDATE_MODULES=1 ;;
      --kubectl) KUBECTL=1 ;;
      --controller-manager) KCM=1 ;;
      --scheduler) SCHED=1 ;;
      --kubelet) KUBELET=1 ;;
      *) die "unknown argument '$arg' (use --print-path, --print-kubectl, --kubectl, --controller-manager, --scheduler, --kubelet or --update-modules)" ;;
    esac
  done
  [[ "$ENVTEST_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "ENVTEST_VERSION must look like v1.34.4"
  [[ "$ETCD_VERSION" =~ ^v3\.[0-9]+\.[0-9]+$ ]] || die "ETCD_VERSION must look like v3.6.16"
  local servers=1
  if [[ "$UPDATE_MODULES" == 0 && "$(assets_dir)" != "$CACHE_DIR" ]]; then
    say "using KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS}"
    servers=0
    if [[ ("$KUBECTL" == 0 || -x "${KUBEBUILDER_ASSETS}/kubectl") &&
      ("$KCM" == 0 || -x "${KUBEBUILDER_ASSETS}/kube-controller-manager") &&
      ("$SCHED" == 0 || -x "${KUBEBUILDER_ASSETS}/kube-scheduler") &&
      ("$KUBELET" == 0 || -x "${KUBEBUILDER_ASSETS}/kubelet") ]]; then return; fi
  fi
  GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
  [[ -x "$GO" ]] || die "go not found: install Go >= 1.24 or set GO=/path/to/go"
  mkdir -p "$CACHE_DIR"
  SCRATCH="$(mktemp -d)"
  trap 'rm -rf "$SCRATCH"' EXIT
  if command -v flock >/dev/null; then exec 9>"$CACHE_DIR/.lock" && flock 9; fi
  if [[ "$servers" == 1 ]]; then
    if [[ "$UPDATE_MODULES" == 1 ]] || ! is_current "$CACHE_DIR/kube-apiserver" "Kubernetes ${ENVTEST_VERSION}"; then
      timed_build kube-apiserver build_kube_command
    fi
    if [[ "$UPDATE_MODULES" == 1 ]] || ! is_current "$CACHE_DIR/etcd" "etcd Version: ${ETCD_VERSION#v}"; then
      timed_build etcd build_etcd
    fi
    say "kube-apiserver and etcd ready in ${CACHE_DIR}"
  fi
  if [[ "$KUBECTL" == 1 ]]; then
    if [[ "$UPDATE_MODULES" == 1 ]] ||
      ! is_current "$CACHE_DIR/kubectl" "Client Version: ${ENVTEST_VERSION}" version --client; then
      timed_build kubectl build_kube_command
    fi
    say "kubectl ready: $CACHE_DIR/kubectl"
  fi
  if [[ "$KCM" == 1 ]]; then
    if [[ "$UPDATE_MODULES" == 1 ]] || ! is_current "$CACHE_DIR/kube-controller-manager" "Kubernetes ${ENVTEST_VERSION}"; then
      timed_build kube-controller-manager build_kube_command
    fi
    say "kube-controller-manager ready: $CACHE_DIR/kube-controller-manager"
  fi
  if [[ "$SCHED" == 1 ]]; then
    if [[ "$UPDATE_MODULES" == 1 ]] || ! is_current "$CACHE_DIR/kube-scheduler" "Kubernetes ${ENVTEST_VERSION}"; then
      timed_build kube-scheduler build_kube_command
    fi
    say "kube-scheduler ready: $CACHE_DIR/kube-scheduler"
  fi
  if [[ "$KUBELET" == 1 ]]; then
    if [[ "$UPDATE_MODULES" == 1 ]] || ! is_current "$CACHE_DIR/kubelet" "Kubernetes ${ENVTEST_VERSION}"; then
      timed_build kubelet build_kube_command
    fi
    say "kubelet ready: $CACHE_DIR/kubelet"
  fi
}

main "$@"
