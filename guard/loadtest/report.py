"""What the load-test Job prints: a table for people, then one JSON line for programs, which starts
with ``LOADTEST-JSON `` so it can be found in a Job log among other lines."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from guard.loadtest.collective import AllreduceResult, size_label
from guard.loadtest.model import RunResult, memory_targets
from guard.loadtest.verdict import Criteria, Verdict, allreduce_ratios, throughput_ratios
from guard.wire import render_loadtest_summary

JSON_PREFIX = "LOADTEST-JSON "
_HEADER = (
    "GPU",
    "PCI",
    "NAME",
    "ITER",
    "TFLOPS",
    "RATIO",
    "PCIE GEN",
    "PCIE WIDTH",
    "MEMTEST",
    "ALLREDUCE",
)
# The attributes of each per-GPU result in the JSON document.
_BURN = ("iterations", "device_s", "tflops", "error")
_PCIE = ("gen_current", "gen_max", "width_current", "width_max")
_MEMORY = ("bytes_tested", "errors", "gbps", "error")


def as_dict(criteria: Criteria, run: RunResult, verdict: Verdict) -> dict[str, Any]:
    burns = {b.index: b for b in run.burns}
    memory = {m.index: m for m in run.memory}
    links = {link.pci: link for link in run.pcie}
    ratios = throughput_ratios(run.burns)
    targets = {d.index for d in memory_targets(run.devices, run.plan.memory)}
    gpus = [
        asdict(d)
        | {
            "burn": _pick(burns.get(d.index), _BURN, ratio=ratios.get(d.index)),
            "pcie": _pick(links.get(d.pci), _PCIE),
            "memory_target": d.index in targets,
            "memory": _pick(memory.get(d.index), _MEMORY),
            "allreduce": _rank_dict(run.allreduce, d.index),
        }
        for d in run.devices
    ]
    return {
        "verdict": "pass" if verdict.passed else "fail",
        "reasons": list(verdict.reasons),
        "notes": list(verdict.notes),
        "expected_gpus": criteria.expected_gpus,
        "visible_gpus": len(run.devices),
        "min_ratio": criteria.min_ratio,
        "ratio": verdict.ratio,
        "min_tflops": verdict.min_tflops,
        "max_tflops": verdict.max_tflops,
        "backend": run.backend,
        "size": run.plan.size,
        "duration_s": run.plan.duration_s,
        "memory_test": asdict(run.plan.memory),
        "allreduce": _allreduce_dict(criteria, run),
        "gpus": gpus,
    }


def json_line(criteria: Criteria, run: RunResult, verdict: Verdict) -> str:
    return json.dumps(as_dict(criteria, run, verdict), sort_keys=True)


def summary(criteria: Criteria, run: RunResult, verdict: Verdict) -> str:
    """The summary for the termination message (its format: guard.wire, "loadtest")."""
    figures = run.allreduce.sizes if run.allreduce else ()
    largest = max(figures, key=lambda f: f.size_bytes, default=None)
    counts = {
        "verdict": "pass" if verdict.passed else "fail",
        "expected_gpus": criteria.expected_gpus,
        "visible_gpus": len(run.devices),
        "ratio": verdict.ratio,
        "allreduce_busbw_gbps": largest.busbw_gbps if largest else None,
        # Which GPUs it ran on: a device load test's pass counts only for the tainted GPU.
        "gpus": [d.uuid for d in run.devices],
    }
    return render_loadtest_summary(counts, verdict.reasons, verdict.notes)


def text(criteria: Criteria, run: RunResult, verdict: Verdict) -> str:
    """The table, the verdict line and its reasons and notes, then the JSON line."""
    doc = as_dict(criteria, run, verdict)
    rows = [_HEADER, *(_row(gpu) for gpu in doc["gpus"])]
    widths = [max(len(row[col]) for row in rows) for col in range(len(_HEADER))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    ratio = "-" if verdict.ratio is None else f"{verdict.ratio:.3f}"
    lines.append(
        f"verdict={doc['verdict']} expected_gpus={criteria.expected_gpus}"
        f" visible_gpus={len(run.devices)} ratio={ratio} min_ratio={criteria.min_ratio}"
        f" backend={run.backend} size={run.plan.size} duration_s={run.plan.duration_s:g}"
    )
    lines += _allreduce_lines(doc["allreduce"])
    lines += [f"  fail: {reason}" for reason in verdict.reasons]
    lines += [f"  note: {note}" for note in verdict.notes]
    lines.append(JSON_PREFIX + json.dumps(doc, sort_keys=True))
    return "\n".join(lines)


def _row(gpu: dict[str, Any]) -> tuple[str, ...]:
    burn, link, mem = gpu["burn"], gpu["pcie"], gpu["memory"]
    if burn is None:
        iters, tflops, ratio = "-", "no result", "-"
    elif burn["error"] is not None:
        iters, tflops, ratio = str(burn["iterations"]), "exception", "-"
    else:
        iters, tflops = str(burn["iterations"]), f"{burn['tflops']:.4g}"
        ratio = "-" if burn["ratio"] is None else f"{burn['ratio']:.3f}"
    gen = "-" if link is None else f"{_n(link['gen_current'])}/{_n(link['gen_max'])}"
    width = "-" if link is None else f"x{_n(link['width_current'])}/x{_n(link['width_max'])}"
    memtest = _mem(mem, gpu["memory_target"])
    allreduce = _allreduce_cell(gpu["allreduce"])
    row = (gpu["pci"], gpu["name"], iters, tflops, ratio, gen, width, memtest, allreduce)
    return (str(gpu["index"]), *row)


def _allreduce_cell(rank: dict[str, Any] | None) -> str:
    if rank is None:
        return "-"
    if rank["status"] != "ok":
        return str(rank["status"])
    if rank["bus_gbps"] is None:
        return "ok"
    ratio = "" if rank["ratio"] is None else f" {rank['ratio']:.3f}"
    return f"ok {rank['bus_gbps']:.4g} GB/s{ratio}"


def _allreduce_lines(doc: dict[str, Any] | None) -> list[str]:
    """One line per size, as nccl-tests prints a row: time, algbw, busbw."""
    if doc is None or doc["sizes"] is None:
        return []
    head = f"allreduce transport={doc['transport']} world={doc['world']}"
    return [
        f"{head} size={size_label(s['bytes'])} time_us={s['seconds'] * 1e6:.1f}"
        f" algbw_gbps={s['algbw_gbps']:.4g} busbw_gbps={s['busbw_gbps']:.4g}"
        for s in doc["sizes"]
    ]


def _allreduce_dict(criteria: Criteria, run: RunResult) -> dict[str, Any] | None:
    result = run.allreduce
    if result is None:
        skipped = run.allreduce_skipped
        return None if skipped is None else {"skipped": skipped, "sizes": None}
    return {
        "skipped": None,
        "transport": result.transport,
        "world": result.world,
        "completed": result.completed,
        "error": result.error,
        "min_ratio": criteria.allreduce_min_ratio,
        # A SizeFigure's fields, `size_bytes` as "bytes".
        "sizes": [{k.removeprefix("size_"): v for k, v in asdict(f).items()} for f in result.sizes],
    }


def _rank_dict(result: AllreduceResult | None, index: int) -> dict[str, Any] | None:
    outcome = next((o for o in result.outcomes if o.rank == index), None) if result else None
    if result is None or outcome is None:
        return None
    known = index < len(result.gpu_busbw_gbps)
    return {k: v for k, v in asdict(outcome).items() if k != "rank"} | {
        "bus_gbps": result.gpu_busbw_gbps[index] if known else None,
        "ratio": allreduce_ratios(result).get(index),
    }


def _mem(mem: dict[str, Any] | None, is_target: bool) -> str:
    if mem is None:
        return "not run" if is_target else "-"
    if mem["error"] is not None:
        return "exception"
    size = f"{mem['bytes_tested'] / 1e9:.3g} GB {mem['gbps']:.4g} GB/s"
    return f"ok {size}" if mem["errors"] == 0 else f"{mem['errors']} errors {size}"


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)


def _pick(value: object | None, names: tuple[str, ...], **extra: Any) -> dict[str, Any] | None:
    """The named attributes of a result (and `extra`) for the JSON document; a missing result
    stays null."""
    return None if value is None else {name: getattr(value, name) for name in names} | extra
