"""GPU records in a kernel log: Xid lines, identity lines and "fallen off the bus" records.

The driver's shapes (NVIDIA open-gpu-kernel-modules 595.45.04, older drivers where noted)::

    NVRM: Xid (PCI:0000:01:00): 79, pid=7062, name=python3, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, ...    (older drivers)
    NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: ...       (MIG)
    NVRM: Xid (0000:01:00): 13, ...                                         (pre-2015, no PCI:)
    NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (...)
    NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d   (identity)
    NVRM: GPU at 0000:01:00: GPU-<uuid>                                     (identity, pre-2015)
    NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.                     (beside Xid 79)
    NVRM: GPU at 0000:01:00.0 has fallen off the bus.                       (legacy one-liner)
    NVRM: The NVIDIA GPU 0000:01:00.0 / (PCI ID: 10de:2330) installed in this system has /
          fallen off the bus and is not responding to commands.             (probe time, 3 lines)

Driver records of a dead GPU that carry no Xid number (`DEAD_RECORDS`, their verdicts in
guard.evidence.verdict): ``RmInitAdapter failed!``, GSP heartbeat and RPC timeouts, FSP boot
failures and ``GPU lost from the bus`` assertions. Some of them name no GPU (``NVRM: GPU0 …`` is
the driver's instance number, not a PCI address); those have ``pci=None``.

Only the message text is matched, so any prefix (dmesg, journalctl, syslog) works.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from guard.evidence.prefix import line_time
from guard.pci import PciAddressError, normalize_pci

_XID = re.compile(r"(?<![A-Za-z])Xid \((?P<attr>[^)]*)\):\s*(?P<code>\d+)\b,?\s*(?P<rest>.*)$")
_PROC = re.compile(
    r"^(?:pid=(?P<pid>'<unknown>'|\d+),\s*)?(?:name=(?P<name>\S+?),\s*)?(?P<msg>.*)$"
)
_CAUSE = re.compile(r"caused by previous Xid (\d+)")
_ACTION = re.compile(
    r"recovery action changed from 0x(?P<old>[0-9a-fA-F]+)(?: \((?P<old_text>[^)]*)\))?"
    r" to 0x(?P<new>[0-9a-fA-F]+)(?: \((?P<new_text>[^)]*)\))?"
)
# `PCI:` is absent in drivers before ~2015 (the form NVIDIA's Xid page shows).
_IDENTITY = re.compile(
    r"NVRM: GPU at (?:PCI:)?(?P<addr>[0-9A-Fa-f:.]+): (?P<uuid>GPU-[0-9A-Fa-f-]+)"
)
_FELL_BESIDE = re.compile(r"NVRM: GPU (?P<addr>[0-9A-Fa-f:.]+): GPU has fallen off the bus")
_FELL_LEGACY = re.compile(r"NVRM: GPU at (?P<addr>[0-9A-Fa-f:.]+) has fallen off the bus")
_PROBE_START = re.compile(r"NVRM: The NVIDIA GPU (?P<addr>[0-9A-Fa-f:.]+)\b")
_PROBE_END = "fallen off the bus and is not responding"
_PROBE_SPAN = 3  # the probe message is one printk of three lines

# Xid 154 values: 0x0-0x5 as the 595 driver names them; 0x6/0x7 only from NVML (R610+), whose
# log text was not found anywhere, hence the hex value is what counts.
RECOVERY_ACTIONS = {
    0: "None",
    1: "GPU Reset Required",
    2: "Node Reboot Required",
    3: "Drain P2P",
    4: "Drain and Reset",
    5: "Recover IMEX Domain",
    6: "Bus Reset",
    7: "System Reboot",
}


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
    # NV_ERR_GPU_IS_LOST (0x0F): a register read came back all ones, as for Xid 79.
    "gpu-lost": (re.compile(r"NVRM: (?:GPU\d+ )?nvAssert\w*: Assertion failed: GPU lost from"),),
}


@dataclass(frozen=True, slots=True)
class KernelLog:
    xids: tuple[XidRecord, ...]
    fallen_off: tuple[FallenOff, ...]
    uuids: tuple[tuple[str, str], ...]  # (pci, uuid) in log order
    dead: tuple[DeadRecord, ...] = ()


def pci_or_none(text: str) -> str | None:
    """
    >>> pci_or_none("PCI:0000:9B:00"), pci_or_none("0003:00")
    ('0000:9b:00.0', None)
    """
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
    text = printed if printed and printed != "Unknown" else RECOVERY_ACTIONS.get(new, "Unknown")
    return RecoveryChange(old=int(found["old"], 16), new=new, new_text=text)


def parse_xid(line: str, number: int = 0) -> XidRecord | None:
    """One Xid record, or None when the line is not one.

    >>> r = parse_xid("[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', "
    ...               "name=<unknown>, GPU has fallen off the bus.")
    >>> (r.code, r.pci, r.time, r.pid, r.process, r.message)
    (79, '0000:91:00.0', '6781741.548779', None, None, 'GPU has fallen off the bus.')
    >>> r = parse_xid("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: SM (0x1).")
    >>> (r.code, r.pci, r.mig, r.pid)
    (94, '0000:01:00.0', 'GPU-I:05', 7194)
    >>> parse_xid("NVRM: Xid (0000:01:00): 13, Graphics Exception").pci
    '0000:01:00.0'
    >>> parse_xid("NVRM: Xid (PCI:0008:01:00): 45, pid=9, name=a, Ch 00000001 caused by "
    ...           "previous Xid 149").caused_by
    149
    >>> parse_xid("NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 "
    ...           "(None) to 0x7 (Unknown)").recovery
    RecoveryChange(old=0, new=7, new_text='System Reboot')
    >>> parse_xid("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal") is None
    True
    """
    found = _XID.search(line)
    if found is None:
        return None
    address, *mig = found["attr"].split()
    proc = _PROC.match(found["rest"].strip())
    assert proc is not None  # the pattern matches any text
    pid = proc["pid"]
    name = proc["name"]
    cause = _CAUSE.search(proc["msg"])
    return XidRecord(
        code=int(found["code"]),
        pci=pci_or_none(address),
        time=line_time(line[: found.start()]),
        message=proc["msg"].strip(),
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
    """A dead-GPU record without an Xid number, or None.

    >>> parse_dead("[ 903.6] NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)")
    DeadRecord(kind='init-failed', pci='0000:98:00.0', time='903.6', line=0, \
text='NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)')
    >>> parse_dead("NVRM: GPU0 _kgspRpcRecvPoll: GSP RM heartbeat timed out").pci is None
    True
    """
    for kind, patterns in DEAD_RECORDS.items():
        for pattern in patterns:
            found = pattern.search(line)
            if found is None:
                continue
            addr = found.groupdict().get("addr")
            start = line.find("NVRM:")
            start = found.start() if start < 0 else start
            return DeadRecord(
                kind=kind,
                pci=pci_or_none(addr) if addr else None,
                time=line_time(line[:start]),
                line=number,
                text=line[start:].strip(),
            )
    return None


def parse_kernel_log(text: str) -> KernelLog:
    """Every GPU record in `text`; other lines are ignored.

    >>> log = parse_kernel_log(
    ...     "[ 9.1] NVRM: The NVIDIA GPU 0000:01:00.0\\n"
    ...     "        NVRM: (PCI ID: 10de:2330) installed in this system has\\n"
    ...     "        NVRM: fallen off the bus and is not responding to commands.\\n")
    >>> log.fallen_off
    (FallenOff(pci='0000:01:00.0', time='9.1', line=1, form='probe'),)
    """
    xids: list[XidRecord] = []
    fallen: list[FallenOff] = []
    uuids: list[tuple[str, str]] = []
    dead: list[DeadRecord] = []
    probe: FallenOff | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if probe is not None and _PROBE_END in line:
            fallen.append(probe)
            probe = None
        elif probe is not None and number - probe.line >= _PROBE_SPAN:
            probe = None
        if (record := parse_xid(line, number)) is not None:
            xids.append(record)
        elif (one := _fallen_one_line(line, number)) is not None:
            fallen.append(one)
        elif (ident := _IDENTITY.search(line)) and (pci := pci_or_none(ident["addr"])):
            uuids.append((pci, ident["uuid"]))
        elif (start := _PROBE_START.search(line)) and (pci := pci_or_none(start["addr"])):
            probe = FallenOff(pci, line_time(line[: start.start()]), number, "probe")
            if _PROBE_END in line:  # the whole record joined on one line
                fallen.append(probe)
                probe = None
        elif (record_dead := parse_dead(line, number)) is not None:
            dead.append(record_dead)
    return KernelLog(tuple(xids), tuple(fallen), tuple(uuids), tuple(dead))


def same_gpu(a: str | None, b: str) -> bool:
    """Xid lines carry no PCI function, so GPUs match on domain, bus and device.

    >>> same_gpu("0000:99:00.0", "0000:99:00.1"), same_gpu(None, "0000:99:00.0")
    (True, False)
    """
    return a is not None and a[:-2] == b[:-2]


def for_gpu(log: KernelLog, pci: str) -> KernelLog:
    """The records of one GPU (`pci` in sysfs form)."""
    return KernelLog(
        xids=tuple(x for x in log.xids if same_gpu(x.pci, pci)),
        fallen_off=tuple(f for f in log.fallen_off if same_gpu(f.pci, pci)),
        uuids=tuple(u for u in log.uuids if same_gpu(u[0], pci)),
        dead=tuple(d for d in log.dead if same_gpu(d.pci, pci)),
    )


def unattributed(log: KernelLog) -> tuple[DeadRecord, ...]:
    """Dead-GPU records whose line names no GPU."""
    return tuple(d for d in log.dead if d.pci is None)


def named_gpus(log: KernelLog) -> tuple[str, ...]:
    """Every GPU the log names at all: records and identity lines."""
    found = set(gpus(log)) | {u[0] for u in log.uuids}
    return tuple(sorted(found))


def gpus(log: KernelLog) -> tuple[str, ...]:
    """Sorted GPU addresses that have an Xid, fallen-off or dead-GPU record."""
    found = {x.pci for x in log.xids if x.pci} | {f.pci for f in log.fallen_off}
    found |= {d.pci for d in log.dead if d.pci}
    return tuple(sorted(found))
