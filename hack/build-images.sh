#!/usr/bin/env bash
# Builds both images (`make image`) with the OCI builder this machine has: docker when its daemon
# answers, else podman, else buildah. Without one, the guard's image is built offline as the node
# tier builds it (hack/node/image.py: Debian packages by mmdebstrap and the project's wheel, no
# registry; root), written as an OCI archive to IMAGE_DIR; the load-test image is then left out
# with one line (its CUDA torch comes from its base image, in a registry). Without either: one
# line, exit 0.
#
#   hack/build-images.sh                  tags from manifests/base/images.yaml (what the base deploys)
#   IMAGE=… LOADTEST_IMAGE=… hack/build-images.sh
#   IMAGE_DIR=…   where the offline build writes gpu-node-guard.oci.tar (default: dist/images)
#   PY=…          the python whose pip builds the wheels offline (default: python3)
#
# Push them to your mirror and set the same references with `kustomize edit set image` in your
# overlay (docs/deploy.md, "Images").
set -euo pipefail
cd "$(dirname "$0")/.."

# The reference of container NAME in manifests/base/images.yaml.
reference() {
  sed -n "/- name: $1\$/{n;s/^ *image: *//p;}" manifests/base/images.yaml
}

IMAGE="${IMAGE:-$(reference guard)}"
LOADTEST_IMAGE="${LOADTEST_IMAGE:-$(reference loadtest)}"
[[ -n "$IMAGE" && -n "$LOADTEST_IMAGE" ]] || { echo "make image: no image references in manifests/base/images.yaml" >&2; exit 1; }

builder() {
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then echo "docker build"
  elif command -v podman >/dev/null; then echo "podman build"
  elif command -v buildah >/dev/null; then echo "buildah bud"
  fi
}

# The offline build of the guard's image: root (mmdebstrap, chroot) and mmdebstrap.
offline() {
  local out="${IMAGE_DIR:-dist/images}" cache="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-node-guard/node"
  local py="${PY:-python3}"
  mkdir -p "$out" "$cache"
  # the node tier's cache: its dependency layer is reused, one build at a time
  if command -v flock >/dev/null; then exec 9>"$cache/.lock" && flock 9; fi
  "$py" hack/node/image.py guard --repo . --out "$cache" --python "$py"
  "$py" hack/node/image.py retag "$cache/guard.oci.tar" --name "$IMAGE" --out "$out/gpu-node-guard.oci.tar"
  echo "make image: built $IMAGE offline (no OCI builder here): $out/gpu-node-guard.oci.tar;" \
    "push it with: skopeo copy oci-archive:$out/gpu-node-guard.oci.tar docker://$IMAGE"
  echo "make image: not built: $LOADTEST_IMAGE (its CUDA torch comes from the base image" \
    "$(sed -n 's/^ARG BASE=//p' Dockerfile.loadtest) in a registry; build it with docker, podman or" \
    "buildah where the registry answers)"
}

BUILD="$(builder)"
if [[ -z "$BUILD" ]]; then
  if (( EUID == 0 )) && command -v mmdebstrap >/dev/null; then
    offline
  else
    echo "make image: skipped, no OCI builder here (a docker daemon that answers, podman or" \
      "buildah) and no offline build (it needs root and mmdebstrap: apt-get install mmdebstrap)"
  fi
  exit 0
fi
# shellcheck disable=SC2086 # "docker build" is a command and its subcommand
$BUILD -f Dockerfile -t "$IMAGE" .
# shellcheck disable=SC2086
$BUILD -f Dockerfile.loadtest -t "$LOADTEST_IMAGE" .
echo "make image: built $IMAGE and $LOADTEST_IMAGE with ${BUILD%% *}"
