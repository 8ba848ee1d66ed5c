#!/usr/bin/env bash
# The package as a user gets it: build the wheel, install it ALONE (no extras, no numpy, no
# torch, no checkout on the path) into a fresh venv, and from a directory outside the checkout
# run what a user runs first:
#   --version, bare `gpu-node-guard`, `--help` of every subcommand (found by walking the click
#   group, so a new command is checked without editing this file), the kubectl plugin's
#   `--help`, `render` of every Job kind,
#   the built-in example (`python -m guard.example`, needs the Debian `prometheus` package),
#   every guard module in the wheel one of the checkout's (built from a copy without build/),
#   the tests' CPU load-test backend absent (no numpy_backend in the wheel, `--backend numpy`
#   a usage error),
#   and a shipped data file removed: `run` must stop at start with one line naming it.
# Usage: hack/wheel-check.sh [PYTHON]   (default python3; CI=true turns skips into failures)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

say() { printf 'wheel-check: %s\n' "$*"; }
fail() { say "FAIL: $*" >&2; exit 1; }

say "building the wheel"
# From a copy of the checkout without its build outputs: pip builds in the tree, and a build/ left
# there by an earlier build would ship the modules that have moved or gone since.
mkdir "$work/src"
tar -C "$repo" --exclude=./.git --exclude=./.venv --exclude=./build --exclude=./dist \
  --exclude='*.egg-info' --exclude=__pycache__ -cf - . | tar -C "$work/src" -xf -
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$work/src" >"$work/build.log" 2>&1 \
  || { cat "$work/build.log" >&2; fail "pip wheel failed"; }
wheel="$(ls "$work"/dist/gpu_node_guard-*.whl)"

say "installing $(basename "$wheel") alone into a fresh venv"
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "$wheel" >"$work/install.log" 2>&1 \
  || { cat "$work/install.log" >&2; fail "pip install of the wheel failed"; }
guard="$work/venv/bin/gpu-node-guard"
py="$work/venv/bin/python"

mkdir "$work/outside"
cd "$work/outside"  # nothing of the checkout is importable from here
for module in numpy torch; do
  if "$py" -c "import $module" 2>/dev/null; then fail "$module is installed: not a base install"; fi
done
"$py" -c "import guard, sys; sys.exit(0 if '$repo' not in guard.__file__ else 1)" \
  || fail "guard is imported from the checkout, not the wheel"

run() {  # run "what" command…: the command must succeed and print no traceback
  local what="$1"; shift
  if ! "$@" >"$work/out" 2>&1 || grep -q Traceback "$work/out"; then
    tail -20 "$work/out" >&2
    fail "$what"
  fi
}

run "--version" "$guard" --version
grep -q "gpu-node-guard, version" "$work/out" || fail "--version printed: $(cat "$work/out")"
run "bare gpu-node-guard prints the help" "$guard"
grep -q "^Usage: " "$work/out" || fail "bare gpu-node-guard printed no help"

paths="$("$py" -c 'from guard.cli import cli, command_paths
for path in command_paths(cli): print(" ".join(path))')" || fail "cannot list the subcommands"
count=0
while read -r path; do
  # shellcheck disable=SC2086  # the words of the path are separate arguments
  run "gpu-node-guard $path --help" "$guard" $path --help
  count=$((count + 1))
done <<<"$paths"
say "--help of $count commands: ok"
run "kubectl-gpu_guard --help (the kubectl plugin)" "$work/venv/bin/kubectl-gpu_guard" --help
grep -q "^Usage: kubectl gpu-guard" "$work/out" || fail "the kubectl plugin printed: $(head -1 "$work/out")"
say "the kubectl plugin kubectl-gpu_guard: ok"

# The numpy load-test backend is the tests' (tests/numpy_backend.py): not shipped, not offered.
if "$py" -m zipfile -l "$wheel" | grep -q numpy_backend; then fail "the wheel ships numpy_backend"; fi
# Every module in the wheel is one of the checkout's: nothing stale, nothing moved twice.
"$py" - "$wheel" "$repo" <<'PY' || fail "the wheel ships a module the checkout does not have"
import pathlib, sys, zipfile
repo = pathlib.Path(sys.argv[2])
names = [n for n in zipfile.ZipFile(sys.argv[1]).namelist()
         if n.startswith("guard/") and n.endswith(".py") and not n.startswith("guard/jobtemplates")]
stale = [n for n in names if not (repo / n).is_file()]
if stale:
    print(*stale, sep="\n", file=sys.stderr)
sys.exit(1 if stale or not names else 0)
PY
set +e
"$guard" loadtest run --backend numpy --expected-gpus 1 >"$work/out" 2>&1
code=$?
set -e
[ "$code" = 2 ] && grep -q "Invalid value for '--backend'" "$work/out" \
  || { cat "$work/out" >&2; fail "loadtest run --backend numpy exited $code, not a usage error"; }
say "no numpy load-test backend and no stale module in the wheel: ok"

kinds="$("$py" -c 'from guard.cli import cli
print(*cli.commands["render"].params[0].type.choices)')"
for kind in $kinds; do
  run "render $kind" "$guard" render "$kind" --node gpu-node-b
  grep -q "^kind: Job" "$work/out" || fail "render $kind printed no Job"
done
say "render of every Job kind ($kinds): ok"

if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  run "python -m guard.example" "$py" -m guard.example
  grep -q "dry-run would cordon node=gpu-node-b reason=xid-79" "$work/out" \
    || { tail -20 "$work/out" >&2; fail "the example did not plan the cordon of gpu-node-b"; }
  say "built-in example: ok"
elif [ "${CI:-}" = true ]; then
  fail "prometheus/promtool missing: the example cannot run (install the Debian package prometheus)"
else
  say "SKIP the built-in example: prometheus/promtool not installed (Debian package prometheus)"
fi

# A shipped file removed from the installed package: `run` stops before any query.
data="$("$py" -c 'import guard, pathlib; print(pathlib.Path(guard.__file__).parent / "data")')"
rm "$data/xid-classes.tsv"
set +e
"$guard" run --dry-run --prometheus-url http://127.0.0.1:9 >"$work/out" 2>&1
code=$?
set -e
[ "$code" = 1 ] || fail "run without xid-classes.tsv exited $code, not 1"
grep -q "ERROR abort reason=.*package data: .*xid-classes.tsv" "$work/out" \
  || { cat "$work/out" >&2; fail "run without xid-classes.tsv did not name the file"; }
say "a missing data file stops run at start: ok"
say "passed"
