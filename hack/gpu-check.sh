#!/usr/bin/env bash
# Run the load test for real on this machine's NVIDIA GPUs and put its numbers in context:
# per-GPU burn TFLOPS against the chip's dense fp16 peak and against a measured matmul ceiling
# (best of a short run on GPU 0 alone), and the memory pattern test's GB/s on every GPU.
# The burn should reach at least 70% of the ceiling, or it does not really load the GPU.
#
# Usage: hack/gpu-check.sh [DURATION_S]        (default 20; PYTHON=… picks the interpreter)
# Installs torch, nvidia-ml-py and this package into that interpreter when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DURATION=${1:-20}

"$PY" -c 'import torch' 2>/dev/null || "$PY" -m pip install -q torch
"$PY" -c 'import pynvml' 2>/dev/null || "$PY" -m pip install -q nvidia-ml-py
"$PY" -c 'import guard.loadtest' 2>/dev/null || "$PY" -m pip install -q -e .

GPUS=$("$PY" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
if [ "$GPUS" -eq 0 ]; then
  echo "gpu-check: no CUDA GPU visible to torch" >&2
  exit 1
fi

if command -v gpu-node-guard >/dev/null && gpu-node-guard loadtest --help >/dev/null 2>&1; then
  LOADTEST=(gpu-node-guard loadtest)
else
  LOADTEST=("$PY" -m guard.loadtest)
fi

OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
# --xid 48 is memory-class, so every GPU also gets the memory pattern test.
set +e
"${LOADTEST[@]}" run --backend torch --expected-gpus "$GPUS" --duration-s "$DURATION" \
  --xid 48 | tee "$OUT"
RC=${PIPESTATUS[0]}
set -e
echo "gpu-check: load test exit code $RC"

"$PY" - "$OUT" <<'PYEOF'
"""Compare the load test's per-GPU numbers with the chip's peak and a measured ceiling."""
import json
import sys

import torch

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


def peak(name):
    return next((tflops for key, tflops in PEAKS if key in name), None)


def ceiling(size=8192, runs=5, iterations=50):
    """Best TFLOPS of `runs` back-to-back bursts of fp16 matmuls on GPU 0, device-timed."""
    with torch.cuda.device(0):
        a = torch.randn(size, size, device="cuda", dtype=torch.float16)
        b = torch.randn(size, size, device="cuda", dtype=torch.float16)
        c = torch.empty_like(a)
        for _ in range(10):
            torch.matmul(a, b, out=c)
        best = 0.0
        for _ in range(runs):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iterations):
                torch.matmul(a, b, out=c)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1000
            best = max(best, 2 * size**3 * iterations / seconds / 1e12)
        return best


line = next(row for row in open(sys.argv[1]) if row.startswith("LOADTEST-JSON "))
doc = json.loads(line.removeprefix("LOADTEST-JSON "))
top = ceiling(doc["size"])
print(f"\nmatmul ceiling, GPU 0 alone, {doc['size']}x{doc['size']} fp16: {top:.1f} TFLOPS")
worst = None
for gpu in doc["gpus"]:
    burn, mem = gpu["burn"] or {}, gpu["memory"]
    tflops = burn.get("tflops") or 0.0
    chip = peak(gpu["name"])
    share = tflops / top if top else 0.0
    worst = share if worst is None else min(worst, share)
    of_peak = f"{tflops / chip:.1%} of dense fp16 peak {chip}" if chip else "peak unknown"
    memtest = (
        f"memtest {mem['bytes_tested'] / 1e9:.1f} GB {mem['gbps']:.0f} GB/s errors {mem['errors']}"
        if mem else "memtest not run"
    )
    print(
        f"gpu {gpu['index']} {gpu['pci']} {gpu['name']}: burn {tflops:.1f} TFLOPS"
        f" = {of_peak} = {share:.1%} of ceiling; {memtest}"
    )
print(f"worst burn/ceiling {worst:.1%} (target >= 70%); verdict {doc['verdict']}")
PYEOF
exit "$RC"
