"""Evidence from saved files (`evidence classify`): the same Inputs `collect` reads from a host.

The ``--aer`` file may hold any mix of kernel AER lines, ``lspci -vvv`` blocks of ports and
``grep -H . /sys/bus/pci/devices/<dev>/aer_*`` lines; each part is recognised by its shape.
"""

from __future__ import annotations

import re
from dataclasses import replace

from guard.evidence.aer import parse_grep_counters
from guard.evidence.assess import Inputs, PortInput
from guard.pci import normalize_pci

_LSPCI_HEADER = re.compile(r"^((?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) \S")


def lspci_blocks(text: str) -> dict[str, str]:
    """Device address → its ``lspci -vvv`` block (header line plus indented lines).

    >>> lspci_blocks("x\\n97:01.0 PCI bridge: Intel\\n\\tDevSta:\\tCorrErr-\\nnext line")
    {'0000:97:01.0': '97:01.0 PCI bridge: Intel\\n\\tDevSta:\\tCorrErr-'}
    """
    blocks: dict[str, str] = {}
    current: list[str] = []
    for line in [*text.splitlines(), "end"]:
        if current and line[:1].isspace():
            current.append(line)
            continue
        if current:
            blocks[normalize_pci(current[0].split()[0])] = "\n".join(current)
            current = []
        if _LSPCI_HEADER.match(line):
            current = [line]
    return blocks


def offline_inputs(saved: Inputs, pci: str | None, root_port: str | None) -> Inputs:
    """`saved` with its ports: every device its `aer_text` (the --aer file) describes besides
    the GPU."""
    blocks = lspci_blocks(saved.aer_text)
    counters = parse_grep_counters(saved.aer_text)
    named = set(blocks) | set(counters) | ({root_port} if root_port else set())
    addresses = sorted(named - ({pci} if pci else set()))
    ports = tuple(
        PortInput(
            address,
            "root port" if address == root_port else "port",
            blocks.get(address),
            counters.get(address, {}),
        )
        for address in addresses
    )
    return replace(saved, ports=ports, gpu_counters=counters.get(pci, {}) if pci else {})
