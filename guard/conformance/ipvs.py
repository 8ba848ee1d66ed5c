"""ipvs-resolvable, ipvs-persist, ipvs-loaded: kube-proxy in IPVS mode needs the host's ip_vs. On
the incident's 5.15 kernels ip_vs declares no netlink autoload alias (added in 5.16), so nothing
loads it on demand: after a reboot only systemd-modules-load (modules-load.d) loads it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from guard.conformance.hostfs import HostFS, guarded
from guard.conformance.model import ItemResult, Status, unknown_result
from guard.doors.hostexec import Runner, Unknown

MODULE = "ip_vs"
PERSIST_FILE = "/etc/modules-load.d/ipvs.conf"
# systemd-modules-load reads these in this precedence: a file name in an earlier directory hides
# the same name in later ones (modules-load.d(5)).
MODULES_LOAD_DIRS = (
    "/etc/modules-load.d",
    "/run/modules-load.d",
    "/usr/local/lib/modules-load.d",
    "/usr/lib/modules-load.d",
    "/lib/modules-load.d",
)
MODULE_TREES = ("/lib/modules", "/usr/lib/modules")


@dataclass(frozen=True, slots=True)
class IndexLookup:
    """Where the module index of kernel `kernel` puts ip_vs."""

    kernel: str
    state: Literal["builtin", "module", "absent", "no-index", "file-missing"]
    where: str  # the index directory, plus the module file when there is one


@dataclass(frozen=True, slots=True)
class IpvsFacts:
    index: IndexLookup | Unknown
    persist_files: tuple[str, ...] | Unknown
    loaded: bool | Unknown


def module_name(path: str) -> str:
    """modprobe's name for a module file: no directory, no .ko suffix, '-' is '_'."""
    base = path.rsplit("/", 1)[-1]
    return re.sub(r"\.ko(\.(xz|gz|zst))?$", "", base).replace("-", "_")


def dep_entry(modules_dep: str, name: str) -> str | None:
    """The module path that modules.dep lists for `name`."""
    paths = (line.split(":", 1)[0].strip() for line in modules_dep.splitlines())
    return next((path for path in paths if path and module_name(path) == name), None)


def alias_target(modules_alias: str, name: str) -> str | None:
    """`alias <name> <module>` in modules.alias, normalised like modprobe does."""
    for fields in map(str.split, modules_alias.splitlines()):
        if len(fields) == 3 and fields[0] == "alias" and fields[1].replace("-", "_") == name:
            return fields[2].replace("-", "_")
    return None


def lists_module(conf: str, name: str) -> bool:
    """A modules-load.d file names the module on a line of its own; '#' and ';' start comments."""
    lines = (line.strip() for line in conf.splitlines())
    return any(text and text[0] not in "#;" and text.replace("-", "_") == name for text in lines)


def read_kernel(fs: HostFS, runner: Runner) -> str | Unknown:
    """The running kernel's release: /proc/sys/kernel/osrelease, else `uname -r`."""
    text = guarded(lambda: fs.read_text("/proc/sys/kernel/osrelease"), "osrelease")
    if isinstance(text, Unknown):
        return text
    if text is not None and text.strip():
        return text.strip()
    result = runner.run(("uname", "-r"))
    return result.stdout.strip() if result.ok else result.as_unknown()


def lookup_index(fs: HostFS, kernel: str) -> IndexLookup:
    trees = [f"{t}/{kernel}" for t in MODULE_TREES if fs.exists(f"{t}/{kernel}/modules.dep")]
    if not trees:
        return IndexLookup(kernel, "no-index", f"{MODULE_TREES[0]}/{kernel}")
    tree = trees[0]
    builtin = (fs.read_text(f"{tree}/modules.builtin") or "").split()
    if any(module_name(p) == MODULE for p in builtin):
        return IndexLookup(kernel, "builtin", f"{tree}/modules.builtin")
    dep = fs.read_text(f"{tree}/modules.dep") or ""
    target = alias_target(fs.read_text(f"{tree}/modules.alias") or "", MODULE) or MODULE
    entry = dep_entry(dep, target)
    if entry is None:
        return IndexLookup(kernel, "absent", tree)
    path = entry if entry.startswith("/") else f"{tree}/{entry}"
    return IndexLookup(kernel, "module" if fs.exists(path) else "file-missing", path)


def persist_files(fs: HostFS) -> tuple[str, ...]:
    """Effective modules-load.d files that list ip_vs (a name masked by an earlier directory, or
    linked to /dev/null, does not count)."""
    seen: set[str] = set()
    found = []
    for directory in MODULES_LOAD_DIRS:
        for name in fs.listdir(directory):
            if not name.endswith(".conf") or name in seen:
                continue
            seen.add(name)
            path = f"{directory}/{name}"
            if fs.readlink(path) != "/dev/null" and lists_module(fs.read_text(path) or "", MODULE):
                found.append(path)
    return tuple(found)


def read_loaded(fs: HostFS) -> bool | Unknown:
    """Loaded (or built in): /sys/module/ip_vs exists (it does for a loaded module, and for a
    built-in one since ip_vs has parameters), or /proc/modules lists it. Either source alone
    answers, so the node agent needs only /sys/module mounted."""
    if fs.exists(f"/sys/module/{MODULE}"):
        return True
    text = fs.read_text("/proc/modules")
    if text is not None:
        return MODULE in {line.split()[0] for line in text.splitlines() if line.strip()}
    if fs.exists("/sys/module"):
        return False
    return Unknown("ip_vs state", "neither /proc/modules nor /sys/module under the root")


def read_ipvs(fs: HostFS, runner: Runner) -> IpvsFacts:
    kernel = read_kernel(fs, runner)
    index: IndexLookup | Unknown = (
        kernel
        if isinstance(kernel, Unknown)
        else guarded(lambda: lookup_index(fs, kernel), "the module index")
    )
    return IpvsFacts(
        index=index,
        persist_files=guarded(lambda: persist_files(fs), "modules-load.d"),
        loaded=guarded(lambda: read_loaded(fs), "/proc/modules"),
    )


# No index for the running kernel: its modules never installed, or depmod never ran.
def judge_resolvable(facts: IpvsFacts) -> ItemResult:
    name = "ipvs-resolvable"
    look = facts.index
    if isinstance(look, Unknown):
        return unknown_result(name, look)
    k = look.kernel
    if look.state in ("builtin", "module"):
        return ItemResult(name, Status.PASS, f"kernel {k}: ip_vs {look.state} ({look.where})")
    fix_index = f"install the module package of kernel {k}, then depmod -a {k}"
    observed = {
        "no-index": f"kernel {k}: no modules.dep under {look.where}",
        "absent": f"kernel {k}: ip_vs not in the module index ({look.where})",
        "file-missing": f"kernel {k}: ip_vs indexed but {look.where} is missing",
    }[look.state]
    return ItemResult(name, Status.FAIL, observed, fix_index)


def judge_persist(facts: IpvsFacts) -> ItemResult:
    name = "ipvs-persist"
    if isinstance(facts.persist_files, Unknown):
        return unknown_result(name, facts.persist_files)
    if facts.persist_files:
        return ItemResult(name, Status.PASS, "ip_vs listed in " + ", ".join(facts.persist_files))
    seen = "no modules-load.d file lists ip_vs: it will be missing after the next reboot"
    return ItemResult(name, Status.FAIL, seen, f"echo ip_vs > {PERSIST_FILE} (or run with --fix)")


def judge_loaded(loaded: bool | Unknown) -> ItemResult:
    """From `read_loaded` alone, so the node agent judges it without the rest of IpvsFacts."""
    name = "ipvs-loaded"
    if isinstance(loaded, Unknown):
        return unknown_result(name, loaded)
    if loaded:
        return ItemResult(name, Status.PASS, "ip_vs loaded")
    seen = "ip_vs not loaded: kube-proxy in IPVS mode exits with 'Ipvs not supported'"
    fix = "modprobe ip_vs (or run with --fix), then check kube-proxy"
    return ItemResult(name, Status.FAIL, seen, fix)


# --fix: the only repairs the check makes, both easy to undo (docs/conformance.md): load the module,
# and write PERSIST_FILE only when no modules-load.d file lists ip_vs (never overwritten).
FIXABLE = ("ipvs-loaded", "ipvs-persist")
PERSIST_TEXT = f"# kube-proxy in IPVS mode needs {MODULE} after every boot\n{MODULE}\n"


def plan_fixes(results: tuple[ItemResult, ...]) -> tuple[str, ...]:
    """The ip_vs items that FAILed, in FIXABLE order; nothing for any other item or status."""
    failed = {r.name for r in results if r.status is Status.FAIL}
    return tuple(item for item in FIXABLE if item in failed)


def _load(fs: HostFS, runner: Runner) -> ItemResult:
    name = "ipvs-loaded"
    result = runner.run(("modprobe", MODULE))
    if result.error:
        return ItemResult(name, Status.UNKNOWN, str(result.as_unknown()), "modprobe by hand")
    if result.returncode != 0:
        seen = f"{MODULE} not loaded; {result.as_unknown()}"
        return ItemResult(name, Status.FAIL, seen, "see ipvs-resolvable; modprobe by hand")
    loaded = guarded(lambda: read_loaded(fs), "/proc/modules")
    if isinstance(loaded, Unknown):
        return unknown_result(name, loaded)
    if not loaded:
        seen = f"modprobe {MODULE} exited 0 but {MODULE} is not loaded"
        return ItemResult(name, Status.FAIL, seen, "check dmesg on the node")
    return ItemResult(name, Status.FIXED, f"loaded by modprobe {MODULE}")


def _write(fs: HostFS) -> ItemResult:
    name = "ipvs-persist"
    path = PERSIST_FILE
    try:
        fs.write_new(path, PERSIST_TEXT)
    except FileExistsError:
        seen = f"{path} exists but does not list {MODULE}; not overwritten"
        return ItemResult(name, Status.FAIL, seen, f"add a line {MODULE} to {path}")
    except OSError as exc:
        seen = f"cannot write {path}: {exc.strerror or exc}"
        return ItemResult(name, Status.FAIL, seen, f"echo {MODULE} > {path}")
    return ItemResult(name, Status.FIXED, f"wrote {path} listing {MODULE}")


def apply_fixes(items: tuple[str, ...], fs: HostFS, runner: Runner) -> tuple[ItemResult, ...]:
    """The new result of each fixed item: FIXED, or why the repair did not take."""
    return tuple(_load(fs, runner) if item == "ipvs-loaded" else _write(fs) for item in items)
