"""GPU records in a kernel log: Xid, identity and "fallen off the bus" lines, and the driver's
dead-GPU records without an Xid (`DEAD_RECORDS`; ``NVRM: GPU0 …`` names no GPU: ``pci=None``).
Only the message text is matched, so any prefix works (docs/evidence.md lists the shapes)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from guard.evidence.verdict import RECOVERY_ACTIONS
from guard.pci import PciAddressError, normalize_pci

# Digit counts are bounded (an Xid has at most 6 digits, a pid 10): a line with a number of
# twenty million digits is then not a record, instead of an int() that refuses it.
_XID = re.compile(
    r"(?<![A-Za-z])Xid \((?P<attr>[^)]{0,200})\):\s*(?P<code>\d{1,7})\b,?\s*(?P<rest>.*)$"
)
_PROC = re.compile(
    r"^(?:pid=(?P<pid>'<unknown>'|\d{1,10}),\s*)?(?:name=(?P<name>\S+?),\s*)?(?P<msg>.*)$"
)
_CAUSE = re.compile(r"caused by previous Xid (\d{1,7})\b")
_ACTION = re.compile(
    r"recovery action changed from 0x(?P<old>[0-9a-fA-F]{1,16})(?: \((?P<old_text>[^)]*)\))?"
    r" to 0x(?P<new>[0-9a-fA-F]{1,16})(?: \((?P<new_text>[^)]*)\))?"
)
KEEP_FIRST = 100  # Xid records kept per GPU from the start of the log …
KEEP_LAST = 100  # … and from its end; every record is still counted in `totals`
MAX_MESSAGE = 500  # characters of one record's message
# `PCI:` is absent in drivers before ~2015 (the form NVIDIA's Xid page shows).
_IDENTITY = re.compile(
    r"NVRM: GPU at (?:PCI:)?(?P<addr>[0-9A-Fa-f:.]+): (?P<uuid>GPU-[0-9A-Fa-f-]+)"
)
_FELL_BESIDE = re.compile(r"NVRM: GPU (?P<addr>[0-9A-Fa-f:.]+): GPU has fallen off the bus")
_FELL_LEGACY = re.compile(r"NVRM: GPU at (?P<addr>[0-9A-Fa-f:.]+) has fallen off the bus")
_PROBE_START = re.compile(r"NVRM: The NVIDIA GPU (?P<addr>[0-9A-Fa-f:.]+)\b")
_PROBE_END = "fallen off the bus and is not responding"
_PROBE_SPAN = 3  # the probe message is one printk of three lines


@dataclass(frozen=True, slots=True)
class RecoveryChange:
    old: int
    new: int
    new_text: str


@dataclass(frozen=True, slots=True)
class XidRecord:
    code: int
    pci: str | None  # sysfs form 0000:bb:dd.0; None when the driver printed no usable address
    time: str | None
    message: str
    line: int
    pid: int | None = None
    process: str | None = None
    mig: str | None = None
    caused_by: int | None = None
    recovery: RecoveryChange | None = None


@dataclass(frozen=True, slots=True)
class FallenOff:
    pci: str
    time: str | None
    line: int
    form: str  # "beside-xid" | "legacy" | "probe"


@dataclass(frozen=True, slots=True)
class XidTotal:
    """Every record of one Xid code on one GPU, kept or not: how many, first and last time."""

    pci: str | None
    code: int
    count: int
    first_time: str | None
    last_time: str | None


@dataclass(frozen=True, slots=True)
class DeadRecord:
    """A driver line saying the GPU is dead or unusable, with no Xid number on it."""

    kind: str  # a key of DEAD_RECORDS
    pci: str | None  # None: the line names no GPU
    time: str | None
    line: int
    text: str  # the message from NVRM: on, as printed


_ADDR = r"(?P<addr>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
# kind -> message patterns, each with an optional `addr` group. Sources: tests/fixtures/
# kernel-log/SOURCES.md (real lines), the driver's format strings where no real line was found.
DEAD_RECORDS: dict[str, tuple[re.Pattern[str], ...]] = {
    # osinit/osapi: the RM could not initialise the GPU; the device is not attached.
    "init-failed": (
        re.compile(rf"NVRM: GPU {_ADDR}: RmInitAdapter failed!"),
        re.compile(r"NVRM: RmInitAdapter failed!"),  # older drivers: no address
    ),
    # kernel_gsp.c: the GSP firmware stopped answering (heartbeat) or RPCs time out.
    "gsp-timeout": (
        re.compile(r"NVRM: (?:GPU\d+ )?_kgspIsHeartbeatTimedOut: Heartbeat timed out"),
        re.compile(r"NVRM: (?:GPU\d+ )?_kgspRpcRecvPoll: GSP RM heartbeat timed out"),
        re.compile(rf"NVRM: Rate limiting GSP RPC error prints for GPU at PCI:{_ADDR}"),
    ),
    # kern_fsp_gh100.c: the FSP (Hopper and later) did not boot; Xid 143 when it is logged.
    "fsp-boot": (
        re.compile(rf"NVRM: kfsp\w+: GPU {_ADDR}\s*$"),
        re.compile(r"NVRM: kfsp\w*: Timed out waiting for FSP"),
        re.compile(r"while polling for FSP boot complete"),
    ),
    # NV_ERR_GPU_IS_LOST (0x0F): a register read came back all ones, as for Xid 79; printed
    # through NV_ASSERT_OK or NV_CHECK_OK, the same error.
    "gpu-lost": (
        re.compile(
            r"NVRM: (?:GPU\d+ )?nv(?:Assert|Check)\w*: (?:Assertion|Check) failed: GPU lost from"
        ),
    ),
}


@dataclass(frozen=True, slots=True)
class KernelLog:
    xids: tuple[XidRecord, ...]  # at most KEEP_FIRST + KEEP_LAST per GPU
    fallen_off: tuple[FallenOff, ...]
    uuids: tuple[tuple[str, str], ...]  # (pci, uuid) in log order
    totals: tuple[XidTotal, ...] = ()  # per (GPU, code), in order of first appearance
    dead: tuple[DeadRecord, ...] = ()


# The time in front of a line, whatever tool printed it (docs/evidence.md lists the formats).
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
_CTIME = re.compile(r"\[(\w{3} \w{3} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]")
# Month token is any word (Dec, 6月, cze); the day may be padded with a second space.
_SHORT = re.compile(r"^(\S+ +\d{1,2} \d{2}:\d{2}:\d{2})\b")
_MONOTONIC = re.compile(r"\[\s*(\+?\d+\.\d+)\]")


def line_time(prefix: str) -> str | None:
    """The wall-clock time in `prefix` if it has one, else the seconds since boot, else None."""
    for pattern in (_ISO, _CTIME, _SHORT, _MONOTONIC):
        found = pattern.search(prefix)
        if found:
            text = found.group(1) if pattern.groups else found.group(0)
            return " ".join(text.split())
    return None


def pci_or_none(text: str) -> str | None:
    """`text` (``PCI:`` prefix and all spellings) in sysfs form, or None when it is no address."""
    try:
        return normalize_pci(text.removeprefix("PCI:"))
    except PciAddressError:
        return None


def _recovery(message: str) -> RecoveryChange | None:
    found = _ACTION.search(message)
    if found is None:
        return None
    new = int(found["new"], 16)
    printed = (found["new_text"] or "").strip()
    named = RECOVERY_ACTIONS.get(new, ("Unknown", None))[0]
    text = printed if printed and printed != "Unknown" else named
    return RecoveryChange(old=int(found["old"], 16), new=new, new_text=text)


def parse_xid(line: str, number: int = 0) -> XidRecord | None:
    """One Xid record, or None when the line is not one."""
    found = _XID.search(line)
    if found is None:
        return None
    address, *mig = found["attr"].split()
    proc = _PROC.match(found["rest"].strip())
    assert proc is not None  # the pattern matches any text
    pid, name, cause = proc["pid"], proc["name"], _CAUSE.search(proc["msg"])
    return XidRecord(
        code=int(found["code"]),
        pci=pci_or_none(address),
        time=line_time(line[: found.start()]),
        message=proc["msg"].strip()[:MAX_MESSAGE],
        line=number,
        pid=int(pid) if pid and pid.isdigit() else None,
        process=name if name and name != "<unknown>" else None,
        mig=" ".join(mig) or None,
        caused_by=int(cause.group(1)) if cause else None,
        recovery=_recovery(proc["msg"]),
    )


def _fallen_one_line(line: str, number: int) -> FallenOff | None:
    for pattern, form in ((_FELL_BESIDE, "beside-xid"), (_FELL_LEGACY, "legacy")):
        found = pattern.search(line)
        if found and (pci := pci_or_none(found["addr"])):
            return FallenOff(pci, line_time(line[: found.start()]), number, form)
    return None


def parse_dead(line: str, number: int = 0) -> DeadRecord | None:
    """A dead-GPU record without an Xid number, or None."""
    for kind, patterns in DEAD_RECORDS.items():
        for found in filter(None, (pattern.search(line) for pattern in patterns)):
            addr = found.groupdict().get("addr")
            start = line.find("NVRM:")
            start = found.start() if start < 0 else start
            pci = pci_or_none(addr) if addr else None
            return DeadRecord(kind, pci, line_time(line[:start]), number, line[start:].strip())
    return None


def parse_kernel_log(text: str) -> KernelLog:
    """Every GPU record in `text`; other lines are ignored."""
    scan = KernelLogScan()
    for number, line in enumerate(lines_of(text), start=1):
        scan.add(number, line)
    return scan.result()


def lines_of(text: str) -> Iterator[str]:
    """The lines of `text` one at a time, without a list of all of them (`str.splitlines`
    doubles a 100 MB log's memory)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        yield text[start:end].rstrip("\r")
        start = end + 1


class KernelLogScan:
    """The parser fed one line at a time (a 100 MB log is never held): it keeps the first and
    last Xid records of each GPU and counts all of them, so its memory does not grow with the
    log's length."""

    def __init__(self) -> None:
        self._first: dict[str | None, list[XidRecord]] = {}
        self._last: dict[str | None, deque[XidRecord]] = {}
        self._totals: dict[tuple[str | None, int], list[Any]] = {}
        self._fallen: list[FallenOff] = []
        self._uuids: dict[tuple[str, str], None] = {}  # ordered, each pair once
        self._probe: FallenOff | None = None
        self._dead: list[DeadRecord] = []

    def add(self, number: int, line: str) -> None:
        probe = self._probe
        if probe is not None and _PROBE_END in line:
            self._fell(probe)
            self._probe = None
        elif probe is not None and number - probe.line >= _PROBE_SPAN:
            self._probe = None
        if "NVRM" not in line and "Xid" not in line:
            return  # the cheap test first: most lines of a kernel log are not the driver's
        if (record := parse_xid(line, number)) is not None:
            self._xid(record)
        elif (one := _fallen_one_line(line, number)) is not None:
            self._fell(one)
        elif (ident := _IDENTITY.search(line)) and (pci := pci_or_none(ident["addr"])):
            self._uuids.pop((pci, ident["uuid"]), None)
            self._uuids[(pci, ident["uuid"])] = None
            while len(self._uuids) > 4 * KEEP_LAST:
                self._uuids.pop(next(iter(self._uuids)))
        elif (start := _PROBE_START.search(line)) and (pci := pci_or_none(start["addr"])):
            self._probe = FallenOff(pci, line_time(line[: start.start()]), number, "probe")
            if _PROBE_END in line:  # the whole record joined on one line
                self._fell(self._probe)
                self._probe = None
        elif (dead := parse_dead(line, number)) is not None and len(self._dead) < KEEP_FIRST:
            self._dead.append(dead)

    def _xid(self, record: XidRecord) -> None:
        total = self._totals.setdefault((record.pci, record.code), [0, record.time, record.time])
        total[0] += 1
        total[2] = record.time or total[2]  # count, first time, last time
        first = self._first.setdefault(record.pci, [])
        if len(first) < KEEP_FIRST:
            first.append(record)
            return
        self._last.setdefault(record.pci, deque(maxlen=KEEP_LAST)).append(record)

    def _fell(self, record: FallenOff) -> None:
        if sum(1 for f in self._fallen if f.pci == record.pci) < KEEP_FIRST:
            self._fallen.append(record)

    def result(self) -> KernelLog:
        kept = [r for records in self._first.values() for r in records]
        kept += [r for records in self._last.values() for r in records]
        totals = tuple(
            XidTotal(pci, code, count, first, last)
            for (pci, code), (count, first, last) in self._totals.items()
        )
        return KernelLog(
            tuple(sorted(kept, key=lambda r: r.line)),
            tuple(self._fallen),
            tuple(self._uuids),
            totals,
            tuple(self._dead),
        )


def same_gpu(a: str | None, b: str) -> bool:
    """Xid lines carry no PCI function, so GPUs match on domain, bus and device."""
    return a is not None and a[:-2] == b[:-2]


def for_gpu(log: KernelLog, pci: str) -> KernelLog:
    """The records of one GPU (`pci` in sysfs form)."""
    return KernelLog(
        xids=tuple(x for x in log.xids if same_gpu(x.pci, pci)),
        fallen_off=tuple(f for f in log.fallen_off if same_gpu(f.pci, pci)),
        uuids=tuple(u for u in log.uuids if same_gpu(u[0], pci)),
        totals=tuple(t for t in log.totals if same_gpu(t.pci, pci)),
        dead=tuple(d for d in log.dead if same_gpu(d.pci, pci)),
    )


def unattributed(log: KernelLog) -> tuple[DeadRecord, ...]:
    """Dead-GPU records whose line names no GPU."""
    return tuple(d for d in log.dead if d.pci is None)


def named_gpus(log: KernelLog) -> tuple[str, ...]:
    """Every GPU the log names at all: records and identity lines."""
    return tuple(sorted(set(gpus(log)) | {u[0] for u in log.uuids}))


def gpus(log: KernelLog) -> tuple[str, ...]:
    """Sorted GPU addresses that have an Xid, fallen-off or dead-GPU record."""
    found = {x.pci for x in log.xids if x.pci} | {f.pci for f in log.fallen_off}
    found |= {d.pci for d in log.dead if d.pci}
    return tuple(sorted(found))
