#!/usr/bin/env bash
# Run the load test for real on this machine's NVIDIA GPUs and put its figures in context, then
# the `gpu` test tier. From the repository root, with a Python that already has torch (CUDA),
# click, jinja2, requests and pyyaml; nvidia-ml-py is optional (nvidia-smi is the fallback),
# pytest for the tier. Nothing is installed: `python3 -m guard.loadtest` runs from this checkout.
#
# Figures, per GPU:
#   burn TFLOPS   against the chip's dense fp16 peak and against a measured matmul ceiling (best
#                 of short bursts at 4096/8192/16384 on that GPU alone); goal: burn >= 70% of it
#   memory test   GB/s against the device-to-device copy bandwidth (read + write bytes, as CUDA's
#                 bandwidthTest counts a D2D copy)
#   all-reduce    the node's NCCL bus bandwidth per size and each GPU's pair figure (from the load
#                 test), and the NCCL path with a world size of 1
#
# Usage: hack/gpu-check.sh [DURATION_S]     (default 20)
#   PYTHON=…              the interpreter (default python3)
#   GPU_CHECK_FIGURES=…   the figures file (default $OUT or /tmp, gpu-check-<host>-<time>.txt)
# Exit status: 0 when the load test passed and the gpu tier passed, else 1.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DURATION=${1:-20}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
FIGURES=${GPU_CHECK_FIGURES:-${OUT:-${TMPDIR:-/tmp}}/gpu-check-${HOSTNAME:-host}-$STAMP.txt}

for module in torch click jinja2 yaml guard.loadtest.cli; do
  "$PY" -c "import $module" 2>/dev/null || {
    echo "gpu-check: $PY cannot import $module (run from the repository root, with torch)" >&2
    exit 1
  }
done
GPUS=$("$PY" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
if [ "$GPUS" -eq 0 ]; then
  echo "gpu-check: no CUDA GPU visible to torch" >&2
  exit 1
fi

RUN_LOG=$(mktemp)
TIER_LOG=$(mktemp)
trap 'rm -f "$RUN_LOG" "$TIER_LOG"' EXIT

echo "== gpu-check: load test on $GPUS GPU(s), ${DURATION}s burn, memory test on every GPU"
# --xid 48 is memory-class, so every GPU also gets the memory pattern test.
"$PY" -m guard.loadtest run --backend torch --expected-gpus "$GPUS" --duration-s "$DURATION" \
  --xid 48 2>&1 | tee "$RUN_LOG"
RUN_RC=${PIPESTATUS[0]}
echo "gpu-check: load test exit code $RUN_RC"

echo "== gpu-check: gpu test tier"
"$PY" -m pytest -q -p no:cacheprovider -m gpu tests/gpu 2>&1 | tee "$TIER_LOG"
TIER_RC=${PIPESTATUS[0]}

echo "== gpu-check: ceilings, copy bandwidth, world-size-1 all-reduce"
"$PY" - "$RUN_LOG" "$TIER_LOG" "$FIGURES" "$RUN_RC" "$TIER_RC" "$DURATION" <<'PYEOF'
"""Compare the load test's per-GPU figures with the chip's peak and measured ceilings."""

import datetime
import json
import platform
import socket
import sys

import torch

from guard.loadtest.collective import AllreducePlan, size_label
from guard.loadtest.ranks import run_allreduce
from guard.loadtest.torch_backend import TorchBackend

run_log, tier_log, figures_path, run_rc, tier_rc, duration = sys.argv[1:7]

# Dense (no sparsity) fp16 tensor-core peak with fp32 accumulate, TFLOPS; first match wins.
PEAKS = [
    # NVIDIA H100 / H200 datasheets: FP16 Tensor Core 1,979 TFLOPS "with sparsity" (SXM), halved.
    ("H200 NVL", None),
    ("H100 NVL", None),
    ("H100 PCIe", 756.5),  # H100 datasheet, PCIe: 1,513 with sparsity, halved
    ("H200", 989.4),
    ("H100", 989.4),
    ("A100", 312.0),  # A100 datasheet: FP16 Tensor Core 312 dense
    # GeForce runs fp16 with fp32 accumulate at half the fp16-accumulate rate: 838.4 sparse
    # fp16-accumulate (product page) / 2 (sparsity) / 2 (fp32 accumulate). Not from a datasheet.
    ("RTX 5090", 209.6),
]
CEILING_RUNS = {4096: 200, 8192: 50, 16384: 10}  # matmuls per burst; best of 5 bursts each


def peak(name):
    return next((tflops for key, tflops in PEAKS if key in name), None)


def device_seconds(work):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    work()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000


def ceiling(index):
    """Best TFLOPS of fp16 matmul bursts on one GPU alone, per size, device-timed."""
    best = {}
    with torch.cuda.device(index):
        for size, iterations in CEILING_RUNS.items():
            a = torch.randn(size, size, device="cuda", dtype=torch.float16)
            b = torch.randn(size, size, device="cuda", dtype=torch.float16)
            c = torch.empty_like(a)

            def burst():
                for _ in range(iterations):
                    torch.matmul(a, b, out=c)

            burst()  # warm-up: cuBLAS picks its kernel
            seconds = min(device_seconds(burst) for _ in range(5))
            best[size] = 2 * size**3 * iterations / seconds / 1e12
            del a, b, c
        torch.cuda.empty_cache()
    return best


def copy_gbps(index, n_bytes=4 << 30):
    """Device-to-device copy, read + write bytes per second (GB/s), best of 5."""
    with torch.cuda.device(index):
        src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        dst.copy_(src)
        seconds = min(device_seconds(lambda: dst.copy_(src)) for _ in range(5))
        del src, dst
        torch.cuda.empty_cache()
    return 2 * n_bytes / seconds / 1e9


def nccl_version():
    try:
        version = torch.cuda.nccl.version()
    except Exception as exc:  # a torch built without NCCL
        return f"unknown ({type(exc).__name__})"
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


out = []


def say(line=""):
    print(line)
    out.append(line)


lines = [row for row in open(run_log) if row.startswith("LOADTEST-JSON ")]
doc = json.loads(lines[-1].removeprefix("LOADTEST-JSON ")) if lines else None
tier = [row.strip() for row in open(tier_log) if row.strip()]
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
say(f"gpu-check {now} host={socket.gethostname()} gpus={torch.cuda.device_count()}"
    f" ({', '.join(names)}) torch={torch.__version__} cuda={torch.version.cuda}"
    f" nccl={nccl_version()} python={platform.python_version()}")
say(f"load test: exit {run_rc}, verdict {doc['verdict'] if doc else 'none'}, burn {duration} s,"
    f" size {doc['size'] if doc else '?'}")
for reason in (doc or {}).get("reasons", []):
    say(f"  fail: {reason}")
for note in (doc or {}).get("notes", []):
    say(f"  note: {note}")
worst = None
for gpu in (doc or {}).get("gpus", []):
    index, name = gpu["index"], gpu["name"]
    burn, mem, link = gpu["burn"] or {}, gpu["memory"], gpu["pcie"]
    tflops = burn.get("tflops") or 0.0
    tops = ceiling(index)
    top = max(tops.values())
    share = tflops / top if top else 0.0
    worst = share if worst is None else min(worst, share)
    chip = peak(name)
    of_peak = f"{tflops / chip:.1%} of dense fp16 peak {chip}" if chip else "peak unknown"
    say(f"gpu {index} {gpu['pci']} {name}")
    say(f"  burn {tflops:.1f} TFLOPS = {of_peak} = {share:.1%} of ceiling {top:.1f}"
        f" (ceiling by size: {', '.join(f'{s}: {t:.1f}' for s, t in tops.items())})")
    copy = copy_gbps(index)
    if mem:
        say(f"  memory test {mem['bytes_tested'] / 1e9:.1f} GB, {mem['gbps']:.0f} GB/s"
            f" = {mem['gbps'] / copy:.1%} of D2D copy {copy:.0f} GB/s, errors {mem['errors']}")
    else:
        say(f"  memory test not run; D2D copy {copy:.0f} GB/s")
    if link:
        say(f"  pcie gen {link['gen_current']}/{link['gen_max']}"
            f" width x{link['width_current']}/x{link['width_max']} (under load)")
    ar = gpu.get("allreduce")
    if ar:
        bw = "-" if ar["bus_gbps"] is None else f"{ar['bus_gbps']:.1f} GB/s"
        say(f"  all-reduce {ar['status']} at {ar['stage']}, best pair {bw}")
allreduce = (doc or {}).get("allreduce") or {}
for size in allreduce.get("sizes") or []:
    say(f"all-reduce world={allreduce['world']} {size_label(size['bytes'])}:"
        f" {size['seconds'] * 1e6:.0f} us, algbw {size['algbw_gbps']:.1f} GB/s,"
        f" busbw {size['busbw_gbps']:.1f} GB/s")
single = run_allreduce(AllreducePlan(TorchBackend().allreduce_spec(), 1, 300.0, 60.0))
status = ", ".join(f"rank {o.rank} {o.status} at {o.stage} {o.detail}".strip()
                   for o in single.outcomes) or f"error {single.error}"
say(f"all-reduce world=1: {status}; mismatches {sum(m.count for m in single.mismatches)}")
for figure in single.sizes:
    say(f"  {size_label(figure.size_bytes)}: {figure.seconds * 1e6:.0f} us,"
        f" algbw {figure.algbw_gbps:.1f} GB/s (busbw 0 by definition for one rank)")
if worst is not None:
    say(f"worst burn/ceiling {worst:.1%} (goal >= 70%)")
say(f"gpu tier: exit {tier_rc}: {tier[-1] if tier else 'no output'}")
with open(figures_path, "w") as handle:
    handle.write("\n".join(out) + "\n")
print(f"gpu-check: figures written to {figures_path}")
PYEOF
PY_RC=$?
if [ "$RUN_RC" -ne 0 ] || [ "$TIER_RC" -ne 0 ] || [ "$PY_RC" -ne 0 ]; then
  exit 1
fi
