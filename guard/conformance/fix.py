"""--fix: the only repairs the check makes, both for ip_vs and both easy to undo.

Load the module when it is not loaded (modprobe through the runner), and write
/etc/modules-load.d/ipvs.conf only when no modules-load.d file lists ip_vs; an existing file of
that name is never overwritten. Everything else is reported for a person to handle.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.conformance.hostfs import HostFS, guarded
from guard.conformance.ipvs import MODULE, PERSIST_FILE, read_loaded
from guard.conformance.model import ItemResult, Status, unknown_result
from guard.doors.hostexec import Runner, Unknown


@dataclass(frozen=True, slots=True)
class LoadModule:
    item: str = "ipvs-loaded"


@dataclass(frozen=True, slots=True)
class WritePersistFile:
    item: str = "ipvs-persist"
    path: str = PERSIST_FILE
    text: str = f"# kube-proxy in IPVS mode needs {MODULE} after every boot\n{MODULE}\n"


FixAction = LoadModule | WritePersistFile


def plan_fixes(results: tuple[ItemResult, ...]) -> tuple[FixAction, ...]:
    """A fix for each ip_vs item that FAILed; nothing for any other item or status."""
    failed = {r.name for r in results if r.status is Status.FAIL}
    actions: list[FixAction] = []
    if "ipvs-loaded" in failed:
        actions.append(LoadModule())
    if "ipvs-persist" in failed:
        actions.append(WritePersistFile())
    return tuple(actions)


def _load(action: LoadModule, fs: HostFS, runner: Runner) -> ItemResult:
    result = runner.run(("modprobe", MODULE))
    if result.error:
        return ItemResult(action.item, Status.UNKNOWN, str(result.as_unknown()), "modprobe by hand")
    if result.returncode != 0:
        seen = f"{MODULE} not loaded; {result.as_unknown()}"
        return ItemResult(action.item, Status.FAIL, seen, "see ipvs-resolvable; modprobe by hand")
    loaded = guarded(lambda: read_loaded(fs), "/proc/modules")
    if isinstance(loaded, Unknown):
        return unknown_result(action.item, loaded)
    if not loaded:
        seen = f"modprobe {MODULE} exited 0 but {MODULE} is not loaded"
        return ItemResult(action.item, Status.FAIL, seen, "check dmesg on the node")
    return ItemResult(action.item, Status.FIXED, f"loaded by modprobe {MODULE}")


def _write(action: WritePersistFile, fs: HostFS) -> ItemResult:
    try:
        fs.write_new(action.path, action.text)
    except FileExistsError:
        seen = f"{action.path} exists but does not list {MODULE}; not overwritten"
        return ItemResult(action.item, Status.FAIL, seen, f"add a line {MODULE} to {action.path}")
    except OSError as exc:
        seen = f"cannot write {action.path}: {exc.strerror or exc}"
        return ItemResult(action.item, Status.FAIL, seen, f"echo {MODULE} > {action.path}")
    return ItemResult(action.item, Status.FIXED, f"wrote {action.path} listing {MODULE}")


def apply_fixes(
    actions: tuple[FixAction, ...], fs: HostFS, runner: Runner
) -> tuple[ItemResult, ...]:
    """The new result of each fixed item: FIXED, or why the repair did not take."""
    return tuple(
        _load(a, fs, runner) if isinstance(a, LoadModule) else _write(a, fs) for a in actions
    )
