#!/usr/bin/env bash
# Builds the node tier's images without a registry or a container engine and caches them outside
# the repository; each is rebuilt only when its inputs change (hack/node/image.py):
#   pause.oci.tar   registry.k8s.io/pause:3.10, hack/node/pause (a static Go binary), which is
#                   also PID 1 of the node's own PID namespace (tests/node)
#   guard.oci.tar   the guard's image as the Dockerfile describes it: Debian's python3 and the
#                   Dockerfile's packages (mmdebstrap), the project's wheel in a venv
#   loadtest.oci.tar  the CPU stand-in for Dockerfile.loadtest's image (its CUDA torch base is in
#                   a registry): Debian's python3-torch (a CPU build with gloo), the Dockerfile's
#                   requirements and the project's wheel, the numpy backend for the GPUs
#
#   hack/node/build.sh               build (or reuse), report the directory on stderr
#   hack/node/build.sh --print-path  print only the directory
#
# Needs root (mmdebstrap, chroot), Go >= 1.24 and the Debian package mmdebstrap; the Debian
# mirror (DEBIAN_MIRROR, default deb.debian.org) and PyPI for the first build.
# Environment: XDG_CACHE_HOME, GO, PY (the python whose pip builds the wheels; default python3).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-node-guard/node"
PY="${PY:-python3}"

die() { echo "node-images: $*" >&2; exit 1; }
say() { echo "node-images: $*" >&2; }

case "${1:-}" in
  --print-path) echo "$CACHE_DIR"; exit 0 ;;
  "") ;;
  *) die "unknown argument '$1' (use --print-path)" ;;
esac
[[ "$(id -u)" == 0 ]] || die "needs root (mmdebstrap and chroot build the images)"
command -v mmdebstrap >/dev/null || die "mmdebstrap not found: apt-get install mmdebstrap"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
[[ -x "$GO" ]] || die "go not found: install Go >= 1.24 or set GO=/path/to/go"
mkdir -p "$CACHE_DIR"
if command -v flock >/dev/null; then exec 9>"$CACHE_DIR/.lock" && flock 9; fi

pause_key="$(cat "$HERE/pause/main.go" "$HERE/pause/go.mod" "$HERE/image.py" | sha256sum | cut -c1-16)"
if [[ ! -f "$CACHE_DIR/pause.oci.tar" || "$(cat "$CACHE_DIR/pause.key" 2>/dev/null)" != "$pause_key" ]]; then
  start=$SECONDS
  GOTOOLCHAIN=local CGO_ENABLED=0 "$GO" build -C "$HERE/pause" -trimpath -ldflags '-s -w' \
    -o "$CACHE_DIR/pause" .
  "$PY" "$HERE/image.py" pause --binary "$CACHE_DIR/pause" --out "$CACHE_DIR"
  echo "$pause_key" >"$CACHE_DIR/pause.key"
  say "built the pause image in $((SECONDS - start)) s"
fi
"$PY" "$HERE/image.py" guard --repo "$REPO" --out "$CACHE_DIR" --python "$PY"
"$PY" "$HERE/image.py" loadtest --repo "$REPO" --out "$CACHE_DIR" --python "$PY"
say "images ready in $CACHE_DIR"
