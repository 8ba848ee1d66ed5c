#!/usr/bin/env bash
# Builds both images (`make image`) with the OCI builder this machine has: docker when its daemon
# answers, else podman, else buildah. Without one: one line, exit 0.
#
#   hack/build-images.sh                  tags from manifests/base/images.yaml (what the base deploys)
#   IMAGE=… LOADTEST_IMAGE=… hack/build-images.sh
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

BUILD="$(builder)"
if [[ -z "$BUILD" ]]; then
  echo "make image: skipped, no OCI builder here (a docker daemon that answers, podman or buildah)"
  exit 0
fi
# shellcheck disable=SC2086 # "docker build" is a command and its subcommand
$BUILD -f Dockerfile -t "$IMAGE" .
# shellcheck disable=SC2086
$BUILD -f Dockerfile.loadtest -t "$LOADTEST_IMAGE" .
echo "make image: built $IMAGE and $LOADTEST_IMAGE with ${BUILD%% *}"
