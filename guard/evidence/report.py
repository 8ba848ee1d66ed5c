"""What on-call reads: the Assessment as plain sentences (text) and as one JSON object.

The same sentences feed the request draft, so the report and the draft never disagree."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guard.evidence import aer
from guard.evidence.assess import Assessment, PortInput
from guard.evidence.kernel_log import DeadRecord, XidRecord
from guard.evidence.lspci import PcieLink
from guard.evidence.verdict import (
    DEAD_RECORD_CLASSES,
    DEAD_RECORD_WORDS,
    RECOVERY_ACTION_CLASSES,
    RECOVERY_ACTION_XID,
)
from guard.xid_tables import CatalogEntry, XidClasses


@dataclass(frozen=True, slots=True)
class Tables:
    """The two data tables, loaded once by the CLI."""

    classes: XidClasses
    catalog: Mapping[int, CatalogEntry]


def verdict_class(record: XidRecord, tables: Tables) -> str | None:
    """The class the verdict table gives the record's code; for Xid 154 the class of the
    recovery action it names (None when it names none or one the table lacks)."""
    if record.code != RECOVERY_ACTION_XID:
        return tables.classes.verdict_of(record.code).value
    if record.recovery is None or record.recovery.new not in RECOVERY_ACTION_CLASSES:
        return None
    return RECOVERY_ACTION_CLASSES[record.recovery.new].value


def _fields(value: object, *names: str) -> dict[str, Any]:
    return {name: getattr(value, name) for name in names}


def dead_dict(d: DeadRecord) -> dict[str, Any]:
    return {
        **_fields(d, "kind", "pci", "time", "line", "text"),
        "what": DEAD_RECORD_WORDS[d.kind],
        "verdict_class": DEAD_RECORD_CLASSES[d.kind].value,
    }


def link_sentence(link: PcieLink) -> str:
    now, cap = (
        f"{'unknown' if s is None else f'{s:g}GT/s'} {'x?' if w is None else f'x{w}'}"
        for s, w in ((link.speed, link.width), (link.cap_speed, link.cap_width))
    )
    text = f"{link.pci}: LnkSta {now} of LnkCap {cap}"
    if link.width_downgraded:
        return text + ": width DOWNGRADED"
    if link.speed_downgraded:
        # An idle GPU lowers its link speed by design; only under load is a low speed a fault.
        return text + ": speed below its maximum (normal when idle; the load test checks it)"
    return text + ": full"


def xid_dict(record: XidRecord, tables: Tables) -> dict[str, Any]:
    entry = tables.catalog.get(record.code)
    names = ("code", "pci", "time", "message", "pid", "process", "mig", "caused_by", "line")
    return {
        **_fields(record, *names),
        "mnemonic": entry.mnemonic if entry else None,
        "catalog_immediate_action": entry.immediate_action if entry else None,
        "verdict_class": verdict_class(record, tables),
    }


def config_sentence(a: Assessment) -> str:
    if a.config is None:
        return "PCI config space: not read."
    if a.config.all_ff is None:
        return "PCI config space: unknown (lspci printed nothing for this GPU)."
    if a.config.all_ff:
        return (
            f"PCI config space reads all ff ({a.config.bytes_read} bytes): "
            "the GPU does not answer config reads."
        )
    if a.config.bytes_read == 0:
        return "PCI config space reads normally (lspci -vv decoded the GPU's capabilities)."
    ids = f", vendor:device {a.config.vendor_device}" if a.config.vendor_device else ""
    return f"PCI config space reads normally ({a.config.bytes_read} bytes{ids})."


def recovery_sentence(a: Assessment) -> str:
    if a.recovery is None:
        return "Driver recovery action (Xid 154): none logged."
    r = a.recovery
    cls = RECOVERY_ACTION_CLASSES.get(r.new)
    follows = (
        f"class {cls.value} (it counts like any other record; config space all ff still wins)"
        if cls is not None
        else "nothing to act on"
    )
    said = f"{r.new_text} (0x{r.new:x}, from 0x{r.old:x})"
    return f"Driver recovery action (Xid 154): {said}; {follows}."


def dead_sentences(a: Assessment) -> tuple[str, ...]:
    """The dead-GPU records without an Xid, one line each, judged ones first."""
    lines = [f"{d.time or 'time unknown'} {DEAD_RECORD_WORDS[d.kind]}: {d.text}" for d in a.dead]
    lines += [
        f"{d.time or 'time unknown'} names no GPU, not judged (the log names other GPUs): {d.text}"
        for d in a.unattributed
    ]
    return tuple(lines)


def smi_sentences(a: Assessment) -> tuple[str, ...]:
    if a.smi is None:
        return ("nvidia-smi -q: no block for this GPU in its output",) if a.smi_read else ()
    if a.smi.no_handle is not None:
        return (f"nvidia-smi -q: {a.smi.no_handle}",)
    return tuple(f"nvidia-smi -q: {label}: {value}" for label, value in a.smi.shown()) or (
        "nvidia-smi -q: no row-remapping, page-retirement or reset-status fields for this GPU",
    )


def _port_sentence(port: PortInput) -> str:
    parts = [f"{port.role} {port.address}:"]
    s = port.status
    if s is None:
        parts.append("lspci not read;")
    elif not s.has_aer:
        parts.append("no AER capability in lspci;")
    else:
        parts.append(f"UESta+ {' '.join(s.uncorrectable) or 'none'};")
        parts.append(f"CESta+ {' '.join(s.correctable) or 'none'};")
    if s is not None and s.link_active is not None:
        parts.append(f"link {'up' if s.link_active else 'DOWN (DLActive-)'};")
    shown = "; ".join(f"{f} {_pairs(c)}" for f, c in aer.nonzero(port.counters).items())
    parts.append(f"sysfs counters: {shown or 'all zero or absent'}")
    return " ".join(parts)


def _pairs(counters: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in counters.items())


_EVENT_WORDS = {
    "received": "{detail} error received{source}",
    "severity": "PCIe Bus Error, severity {detail}",
    "status": "error status {detail}",
    "error": "error bit {detail}",
    "no-handler": "driver has no AER recovery (cannot recover)",
    "recovery-failed": "device recovery failed",
}


def _event_sentence(e: aer.AerEvent) -> str:
    source = f" from {e.source}" if e.source else ""
    what = _EVENT_WORDS[e.kind].format(detail=e.detail, source=source)
    return f"kernel {e.time or '-'} {e.device}: {what}"


def aer_sentences(a: Assessment) -> tuple[str, ...]:
    lines = [_port_sentence(p) for p in a.ports]
    if gpu := aer.nonzero(a.gpu_counters):
        lines.append("GPU sysfs counters: " + "; ".join(f"{f} {_pairs(c)}" for f, c in gpu.items()))
    lines.extend(_event_sentence(e) for e in a.aer_events)
    if not lines:
        lines.append("no AER evidence (many Xid 79 events have none).")
    lines.append(f"Surprise Down: {'yes' if a.surprise_down else 'not seen'}.")
    return tuple(lines)


def to_json(a: Assessment, tables: Tables) -> dict[str, Any]:
    """The machine form; keys are stable (docs/evidence.md)."""
    return {
        "pci": a.pci,
        "verdict": a.verdict.value,
        "reasons": list(a.reasons),
        "uuid": a.uuid,
        "xids": [xid_dict(x, tables) for x in a.xids],
        "reported_xid": a.reported_xid,
        "fallen_off": [_fields(f, "pci", "time", "form", "line") for f in a.fallen_off],
        "recovery_action": a.recovery.new_text if a.recovery else None,
        "recovery_action_code": a.recovery.new if a.recovery else None,
        "config_space_all_ff": a.config.all_ff if a.config else None,
        "config_space_bytes": a.config.bytes_read if a.config else None,
        "aer": {
            "root_port": a.root_port,
            "surprise_down": a.surprise_down,
            "ports": [_port_json(p) for p in a.ports],
            "gpu_counters": aer.nonzero(a.gpu_counters),
            "events": [
                _fields(e, "device", "kind", "time", "detail", "source", "line")
                for e in a.aer_events
            ],
        },
        "other_gpus": list(a.other_gpus),
        "dead_records": [dead_dict(d) for d in a.dead],
        "unattributed_records": [dead_dict(d) for d in a.unattributed],
        "nvidia_smi": _smi_json(a),
        "pcie_links": [_link_json(link) for link in a.links],
        "kernel_log_source": a.kernel_log_source,
        "unknown": [{"what": u.what, "why": u.why} for u in a.unknowns],
    }


def _smi_json(a: Assessment) -> dict[str, Any] | None:
    if a.smi is None:
        return None
    return {
        "pci": a.smi.pci,
        "uuid": a.smi.uuid,
        "no_handle": a.smi.no_handle,
        "fields": {label: value for label, value in a.smi.shown()},
        "findings": [{"verdict": f.verdict.value, "reason": f.reason} for f in a.smi.findings()],
    }


def _link_json(link: PcieLink) -> dict[str, Any]:
    downgraded = _fields(link, "width_downgraded", "speed_downgraded")
    cap = {"cap_speed_gts": link.cap_speed, "cap_width": link.cap_width}
    return {"pci": link.pci, **cap, "speed_gts": link.speed, "width": link.width, **downgraded}


def _port_json(p: PortInput) -> dict[str, Any]:
    names = ("has_aer", "uncorrectable", "correctable", "device_status", "link_active")
    s = p.status
    status = _fields(s, *names) if s else dict.fromkeys(names)
    return {**_fields(p, "address", "role"), **status, "counters": aer.nonzero(p.counters)}


def _xid_line(x: XidRecord, tables: Tables) -> str:
    entry = tables.catalog.get(x.code)
    name = entry.mnemonic if entry else "not in NVIDIA's catalog"
    action = entry.immediate_action if entry else "-"
    mig = f" {x.mig}" if x.mig else ""
    cls = verdict_class(x, tables) or "reported only"
    return (
        f"  {x.time or 'time unknown'}  Xid {x.code}{mig}  {name}  "
        f"[catalog {action}; guard {cls}]  {x.message}"
    )


def to_text(a: Assessment, tables: Tables, title: str) -> str:
    """The human report; every section prints, with 'unknown' where evidence is missing."""
    out = [f"== {title} ==", f"verdict: {a.verdict.value} ({', '.join(a.reasons)})"]
    out.append(f"gpu: {a.pci or 'all GPUs in the log'}  uuid: {a.uuid or 'not in the log'}")
    out.append(f"kernel log: {a.kernel_log_source}")
    out.append("-- Xids for this GPU --")
    out += [_xid_line(x, tables) for x in a.xids] or ["  none in the kernel log"]
    counted = sum(t.count for t in a.xid_totals)
    if counted > len(a.xids):  # the parser keeps the first and last records of each GPU
        per_code = ", ".join(f"Xid {t.code} ×{t.count:,}" for t in a.xid_totals[:20])
        out.append(f"  {counted - len(a.xids):,} more records not listed; counted: {per_code}")
    if a.reported_xid is not None:
        out.append(f"  reported by the guard's metric: Xid {a.reported_xid}")
    out.extend(f"  {f.time or 'time unknown'}  fallen off the bus ({f.form})" for f in a.fallen_off)
    if a.other_gpus:
        out.append(f"  other GPUs with records (not judged): {', '.join(a.other_gpus)}")
    if a.dead or a.unattributed:
        out += ["-- driver records without an Xid --", *(f"  {s}" for s in dead_sentences(a))]
    out += ["-- PCI config space --", f"  {config_sentence(a)}"]
    out.extend(f"  PCIe link {link_sentence(link)}" for link in a.links)
    if a.smi_read:
        out += ["-- nvidia-smi -q --", *(f"  {s}" for s in smi_sentences(a))]
    out += ["-- AER --", *(f"  {s}" for s in aer_sentences(a))]
    out += ["-- recovery action --", f"  {recovery_sentence(a)}"]
    if a.unknowns:
        out += ["-- unknown (could not be read) --", *(f"  {u.what}: {u.why}" for u in a.unknowns)]
    return "\n".join(out) + "\n"
