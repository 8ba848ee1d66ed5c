"""Host tools that answer from the project's fixtures: `journalctl` and `lspci` for the node's
/usr/local/bin (first in PATH), bind-mounted inside the node's mount namespace only
(tests/node/host.py). The evidence Job then reads an incident's kernel log and lspci dump through
a real Pod and the real `nsenter -t 1 -m`. There is no nvidia-smi, as on these machines: the
evidence records it as unknown, the fence Job ends in its error outcome.

Each tool answers exactly the command lines the evidence program runs (guard/evidence/collect.py)
and fails, as the real one fails for an unknown device, on any other."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The incident of gpu-node-b: Xid 79 on 0000:99:00.0, its config space all ones.
SCENARIO = "incident-gpu-node-b.log"
GPU = "0000:99:00.0"
ANSWERS: dict[str, dict[str, tuple[str, int]]] = {
    "journalctl": {
        "-k -b 0 --no-pager -o short-iso-precise": (f"kernel-log/scenarios/{SCENARIO}", 0),
    },
    "lspci": {f"-vvv -xxx -s {GPU}": ("lspci/gpu-all-ff.txt", 0)},
}
DIRECTORY = "host-bin"  # under the node's workdir
# journalctl where journald keeps no journal (Storage=none, or an empty /run/log/journal): exit 0,
# this line on stderr, no kernel line.
NO_JOURNAL = "#!/bin/sh\necho 'No journal files were found.' >&2\nexit 0\n"
# What the real ones say for what they do not have.
REFUSALS = {
    "journalctl": "Data from the specified boot is not available: No such boot ID in journal",
    "lspci": "",
}


def write(directory: Path, fixtures: Path) -> Path:
    """The tools, with copies of their fixtures beside them; returns `directory`."""
    (directory / "fixtures").mkdir(parents=True, exist_ok=True)
    for tool, answers in ANSWERS.items():
        cases = []
        for args, (fixture, code) in answers.items():
            copy = directory / "fixtures" / fixture.replace("/", "-")
            shutil.copyfile(fixtures / fixture, copy)
            cases.append(f"  {shlex.quote(args)}) cat {shlex.quote(str(copy))}; exit {code} ;;")
        refusal = shlex.quote(REFUSALS[tool])
        script = directory / tool
        script.write_text(
            "#!/bin/sh\n"
            f"# {tool} from tests/fixtures (tests/node/fake_host.py)\n"
            'case "$*" in\n'
            + "\n".join(cases)
            + f"\n  *) [ -n {refusal} ] && echo {refusal} >&2; exit 1 ;;\nesac\n"
        )
        script.chmod(0o755)
    return directory


# The node-wide evidence's listing (guard.evidence.node_wide `LSPCI`): four H100s, 0000:2a:00.0
# without its driver; answered only inside `with listing(...)`, so every other test's host lists
# no GPU this way.
LISTING = ("-nn -k -d 10de:", "lspci/gpus-nn-k-one-unbound.txt")
UNBOUND_GPU = "0000:2a:00.0"


@contextmanager
def listing(directory: Path, fixtures: Path) -> Iterator[None]:
    """`lspci` also answers the node-wide listing (`LISTING`), for the duration."""
    script = directory / "lspci"
    kept = script.read_text()
    args, fixture = LISTING
    copy = directory / "fixtures" / fixture.replace("/", "-")
    shutil.copyfile(fixtures / fixture, copy)
    case = f"  {shlex.quote(args)}) cat {shlex.quote(str(copy))}; exit 0 ;;\n"
    script.write_text(kept.replace('case "$*" in\n', 'case "$*" in\n' + case, 1))
    try:
        yield
    finally:
        script.write_text(kept)


@contextmanager
def without_journal(directory: Path) -> Iterator[None]:
    """`journalctl` answers as on a host whose journald keeps no journal, for the duration."""
    script = directory / "journalctl"
    kept = script.read_text()
    script.write_text(NO_JOURNAL)
    try:
        yield
    finally:
        script.write_text(kept)
