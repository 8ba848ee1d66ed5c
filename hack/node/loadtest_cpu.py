#!/opt/guard/bin/python3
"""`gpu-node-guard` in the node tier's CPU stand-in for the load-test image (hack/node/image.py).

The guard's own command runs: its orchestration, verdict, report and termination message, and
its all-reduce ranks (`python -m guard.loadtest.rank`, torch.distributed over gloo, Debian's CPU
build of torch). What stands in for CUDA is the unit tier's numpy backend (tests/numpy_backend.py),
handed to the command as the tests hand it (`BackendOverride`): GPU_NODE_GUARD_CPU_GPUS threads
simulate the GPUs (fp16 matmuls on the CPU, PCIe links that read as full), and its all-reduce is
gloo between processes on the CPU. `loadtest run` takes the Job's arguments but four (CPU_SCALE),
says which in one line, and its report states what ran: a GPU's burn (`--size 8192
--duration-s 90`) is hours of a CPU core; and threads and processes sharing a machine's cores
are not GPUs of one model, so their throughput and pair bandwidths differ by chance (measured
on two shared cores: burn 0.84-0.96 of the fastest, all-reduce pairs 0.07-0.36 of the best), and
the ratios are kept only low enough to still fail a simulated GPU that did nothing. Every other
subcommand is the guard's, unchanged.
"""

from __future__ import annotations

import os
import sys

from numpy_backend import cpu

from guard.cli import cli

# The Job's argument → its value here.
CPU_SCALE = (
    ("--size", "128"),  # one fp16 matmul of this size: tens of ms of one core
    ("--duration-s", "2"),
    ("--min-ratio", "0.25"),
    ("--allreduce-min-ratio", "0.01"),
)


def scaled(argv: list[str]) -> tuple[list[str], list[str]]:
    """`argv` at the CPU's scale (CPU_SCALE), and what changed.

    >>> scaled(["loadtest", "run", "--size", "8192", "--duration-s", "90", "--xid", "79"])
    (['loadtest', 'run', '--size', '128', '--duration-s', '2', '--xid', '79'], \
['--size 8192 -> 128', '--duration-s 90 -> 2'])
    """
    out, changed = list(argv), []
    for flag, value in CPU_SCALE:
        if flag in out[:-1]:
            at = out.index(flag) + 1
            changed.append(f"{flag} {out[at]} -> {value}")
            out[at] = value
    return out, changed


def main() -> None:
    argv = sys.argv[1:]
    if argv[:2] != ["loadtest", "run"]:
        cli(args=argv, prog_name="gpu-node-guard")
        return
    gpus = int(os.environ.get("GPU_NODE_GUARD_CPU_GPUS", "2"))
    run, changed = scaled(argv)
    print(
        f"cpu stand-in: {gpus} simulated GPUs (numpy burn), all-reduce over gloo, not CUDA;"
        f" {', '.join(changed) or 'burn as given'}",
        file=sys.stderr,
        flush=True,
    )
    cli(args=run, prog_name="gpu-node-guard", obj=cpu(gpus))


if __name__ == "__main__":
    main()
