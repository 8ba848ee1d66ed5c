"""Where one cycle's time and memory go: ``python -m bench.profile cpu|mem <gpu-node-guard args>``.

``cpu`` runs the cycle under cProfile and prints the functions with the most cumulative time.
``mem`` traces allocations and, at the moment the cycle hands its raw reads to
`build_snapshot` (every Prometheus answer and cluster object is alive then), prints the largest
allocation sites; it also prints the RSS after imports and at the end.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import resource
import sys
import tracemalloc
from contextlib import redirect_stdout
from typing import Any

TOP = 14


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cycle(args: list[str]) -> None:
    from guard.cli import cli

    with redirect_stdout(io.StringIO()):
        try:
            cli.main(args=args, prog_name="gpu-node-guard", standalone_mode=False)
        except SystemExit as exc:
            if exc.code:
                raise


def cpu(args: list[str]) -> None:
    import guard.cli  # noqa: F401  # module imports are not the cycle (first API use is)

    profiler = cProfile.Profile()
    profiler.runcall(_cycle, args)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(
        r"guard/|json|yaml|requests/sessions|urllib3/response|kubernetes/client/api_client", TOP
    )
    body = text.getvalue()
    print(body[body.find("   ncalls") :].rstrip())


def mem(args: list[str]) -> None:
    import guard.cli

    if "--cluster-snapshot" not in args:
        from kubernetes import client

        # The client imports its API classes (and their models) on first use; tracing that
        # import would take minutes and is not the cycle's data.
        _ = client.CoreV1Api, client.BatchV1Api
    from guard.read import build_snapshot as real

    after_imports = _rss_mb()
    taken: list[tuple[tracemalloc.Snapshot, int]] = []

    def spy(*a: Any, **kw: Any) -> Any:
        taken.append((tracemalloc.take_snapshot(), tracemalloc.get_traced_memory()[0]))
        return real(*a, **kw)

    vars(guard.cli)["build_snapshot"] = spy  # the name `run` calls; guard/ stays untouched
    tracemalloc.start(8)
    _cycle(args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"RSS after imports {after_imports:.0f} MB; peak RSS (traced run) {_rss_mb():.0f} MB")
    print(f"Python heap: peak {peak / 2**20:.0f} MB traced", end="")
    if not taken:
        print("; build_snapshot was not reached")
        return
    snapshot, current = taken[0]
    print(f"; {current / 2**20:.0f} MB alive when build_snapshot starts, by guard line:")
    for where, (size, count) in _by_guard_line(snapshot)[:TOP]:
        print(f"  {size / 2**20:7.1f} MB  {count:>9,} blocks  {where}")


def _by_guard_line(snapshot: tracemalloc.Snapshot) -> list[tuple[str, tuple[int, int]]]:
    """Live memory per innermost guard/ frame that allocated it (other code: its own line)."""
    totals: dict[str, tuple[int, int]] = {}
    for trace in snapshot.traces:
        frames = [f for f in trace.traceback if "/guard/" in f.filename] or [trace.traceback[-1]]
        frame = frames[-1]  # tracebacks run oldest → newest
        where = f"{frame.filename.split('/site-packages/')[-1].split('/main/')[-1]}:{frame.lineno}"
        size, count = totals.get(where, (0, 0))
        totals[where] = (size + trace.size, count + 1)
    return sorted(totals.items(), key=lambda kv: -kv[1][0])


def main() -> None:
    kind, args = sys.argv[1], sys.argv[2:]
    {"cpu": cpu, "mem": mem}[kind](args)


if __name__ == "__main__":
    main()
