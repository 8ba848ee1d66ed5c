"""The argv of each guard Job kind as the admission policy accepts it: a closed set of layouts of
literal words and values, matched one by one with no room for free text (docs/security.md, "argv");
tests/unit/test_policies.py checks every argv the planners build against them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from guard.codec.check_records import MAX_LINKS
from guard.generate.policies.cel import lit
from guard.pci import LINK as LINK_SPEEDS
from guard.pci import SYSFS_PCI

# DNS-1123 subdomain that also fits a label value (the Jobs label their pods with the node).
NODE = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"  # a DNS subdomain: node names reach 253
PCI = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"
XID = r"^[0-9]{1,4}$"
UUID = r"^(GPU-[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}|unknown)$"
COUNT = r"^[1-9][0-9]{0,4}$"
GPUS = r"^[1-9][0-9]?$"
SECONDS = r"^[1-9][0-9]{0,3}$"  # at most 9999 s; the Job's deadline is lower still
SIZE = r"^[1-9][0-9]{0,5}$"
RATIO = r"^(0\.[0-9]{1,6}|1)$"
XID_LIST = r"^[0-9]{1,4}(,[0-9]{1,4}){0,63}$"
VERSION = r"^v?[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,4}([+-]rke2r[0-9]{1,3})?$"
# RE2 refuses nested repeats over 1000 ({2,39} inside {0,31}): the address part is `+`.
CIDRS = r"^[0-9a-fA-F.:]+(/[0-9]{1,3})?(,[0-9a-fA-F.:]+(/[0-9]{1,3})?){0,31}$"
ALLREDUCE = r"^--(no-)?allreduce$"
# A recorded link, as docs/loadtest.md's contract pins it: <pci>=<speed>GT/s,x<width>.
LINK = rf"^{SYSFS_PCI}={LINK_SPEEDS}$"
# The node agent's words are `--flag=value` (manifests/agent/daemonset.yaml), one pattern each.
AGENT_INTERVAL = r"^--interval-s=[1-9][0-9]{0,4}$"
AGENT_PLATFORM = r"^--platform=(rke2|other|auto)$"
AGENT_PROXY = r"^--kube-proxy-mode=(ipvs|iptables|nftables|none|auto)$"
AGENT_DNS = "^--allowed-dns=" + CIDRS[1:]
# Only files under the agent's read-only host mounts (docs/agent.md, "Host paths").
AGENT_RESOLV = r"^--resolv-conf=(/etc/resolv\.conf|/run/systemd/resolve/(stub-)?resolv\.conf)$"


@dataclass(frozen=True, slots=True)
class Value:
    """One argument value: matches `pattern`; with `is_node`, also equals the pod's nodeName."""

    pattern: str
    is_node: bool = False


@dataclass(frozen=True, slots=True)
class Repeat:
    """The rest of the argv: `group` (e.g. ``--expect-link <link>``) repeated 0..`most` times;
    only as the last token of a layout, so every word before it keeps its position."""

    group: tuple[str | Value, ...]
    most: int


Token = str | Value | Repeat
Layout = tuple[Token, ...]


def _flags(*pairs: tuple[str, Token]) -> Layout:
    return tuple(t for pair in pairs for t in pair)


def _words(line: str) -> Layout:
    """Literal words, as on a command line."""
    return tuple(line.split())


def evidence() -> tuple[Layout, ...]:
    node = (*_words("gpu-node-guard evidence collect --node"), Value(NODE, is_node=True))
    return (
        (
            *_words("gpu-node-guard evidence collect"),
            *_flags(
                ("--node", Value(NODE, is_node=True)),
                ("--pci", Value(PCI)),
                ("--xid", Value(XID)),
                ("--uuid", Value(UUID)),
                ("--card-incidents", Value(COUNT)),
                ("--slot-incidents", Value(COUNT)),
            ),
        ),
        # A node trigger's node-wide evidence (guard/plan/common.py `trigger_evidence_args`).
        (*node, "--trigger", "gpu-short", "--expected-gpus", Value(GPUS)),
        (*node, "--trigger", "admission-rejected"),
        (*node, "--trigger", "fabric"),
    )


# A fence needs the GPU's own UUID: `unknown` is in no fence layout.
GPU_UUID = r"^GPU-[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$"


def fence() -> tuple[Layout, ...]:
    """Set or lift, one GPU by its PCI address and UUID; ``--drain`` only where the site allows
    it (guard/generate/policies/site.py); --host-root, --timeout-s and --termination-log are in no
    layout (their defaults: /proc/1/root, 20 s, /dev/termination-log)."""
    gpu = _flags(("--pci", Value(PCI)), ("--uuid", Value(GPU_UUID)))
    return tuple(
        ("gpu-node-guard", "fence", mode, *gpu, *drain)
        for mode in ("set", "lift")
        for drain in ((), ("--drain",))
    )


def conformance() -> tuple[Layout, ...]:
    """--fix (a host write) is in no layout; the optional checks come from the settings."""
    head = _words("gpu-node-guard conformance --root /proc/1/root --nsenter --role worker")
    version, dns = ("--control-plane-version", Value(VERSION)), ("--allowed-dns", Value(CIDRS))
    tail = ("--output", "json")
    return tuple(
        (*head, *_flags(*middle), *tail) for middle in ((), (version,), (dns,), (version, dns))
    )


def loadtest() -> tuple[Layout, ...]:
    """The burn and the all-reduce always stated; the memory test optional; then the links the
    cordon recorded (guard/plan/common.py `loadtest_args`)."""
    base = (
        *_words("gpu-node-guard loadtest run --backend torch"),
        *_flags(
            ("--expected-gpus", Value(GPUS)),
            ("--duration-s", Value(SECONDS)),
            ("--size", Value(SIZE)),
            ("--min-ratio", Value(RATIO)),
        ),
        Value(ALLREDUCE),
        *_flags(("--allreduce-min-ratio", Value(RATIO)), ("--allreduce-timeout-s", Value(SECONDS))),
    )
    memory = _flags(("--xid", Value(XID)), ("--memory-class-xids", Value(XID_LIST)))
    pci = ("--memory-test-pci", Value(PCI))
    links = Repeat(("--expect-link", Value(LINK)), MAX_LINKS)
    return ((*base, links), (*base, *memory, links), (*base, *memory, *pci, links))


def agent(port: int) -> tuple[Layout, ...]:
    """The agent's argv: root and listen address fixed (the mounts, the probed port), the site
    flags of docs/agent.md in their order; --once (one page, then exit) is in no layout."""
    head = (
        *_words("gpu-node-guard agent --root=/host"),
        f"--listen=0.0.0.0:{port}",
        Value(AGENT_INTERVAL),
        Value(AGENT_PLATFORM),
        Value(AGENT_PROXY),
    )
    dns, resolv = Value(AGENT_DNS), Value(AGENT_RESOLV)
    return (head, (*head, dns), (*head, resolv), (*head, dns, resolv))


def variables(layouts: Sequence[Layout], name: str) -> list[tuple[str, str]]:
    """The policy variables `cel` reads: per layout, the patterns of its fixed words (`<name><i>`;
    a literal word is the pattern of itself) and of its repeated group (`<name><i>Group`)."""
    out = [(f"{name}At", lit(list(range(max(_reach(layout) for layout in layouts)))))]
    for i, layout in enumerate(layouts):
        fixed, tail = _split(layout)
        out.append((f"{name}{i}", lit([_pattern(t) for t in fixed])))
        if tail is not None:
            out.append((f"{name}{i}Group", lit([_pattern(t) for t in tail.group])))
    return out


def cel(layouts: Sequence[Layout], v: str, node: str, name: str) -> str:
    """CEL: the list `v` is one of `layouts`; `node` is the CEL expression of the nodeName;
    `name` the prefix of the variables made by `variables` (which the policy must carry)."""
    return " || ".join(
        f"({_cel_one(layout, v, node, f'variables.{name}{i}', f'variables.{name}At')})"
        for i, layout in enumerate(layouts)
    )


def _is_node(token: Token) -> bool:
    return isinstance(token, Value) and token.is_node


def _split(layout: Layout) -> tuple[Layout, Repeat | None]:
    """The fixed words of `layout` and its repeated group (the last token), if any."""
    if layout and isinstance(layout[-1], Repeat):
        return layout[:-1], layout[-1]
    return layout, None


def _reach(layout: Layout) -> int:
    """How many words an argv of `layout` holds at most."""
    fixed, tail = _split(layout)
    return len(fixed) + (len(tail.group) * tail.most if tail else 0)


def _pattern(token: Token) -> str:
    if isinstance(token, Repeat):
        raise ValueError("a Repeat is only the last token of a layout")
    if isinstance(token, str):
        return "^" + re.escape(token) + "$"
    return token.pattern


def _cel_one(layout: Layout, v: str, node: str, words: str, at: str) -> str:
    fixed, tail = _split(layout)
    n = len(fixed)
    nodes = [f"{v}[{i}] == {node}" for i, t in enumerate(fixed) if _is_node(t)]
    if tail is None:
        terms = [f"size({v}) == {n}", f"{at}.all(i, i >= {n} || {v}[i].matches({words}[i]))"]
        return " && ".join([*terms, *nodes])
    if any(_is_node(t) for t in tail.group):
        raise ValueError("a repeated group cannot hold the node name")
    width, most = len(tail.group), len(tail.group) * tail.most
    # `at` holds every position any layout reaches; each is checked where the argv reaches it.
    terms = [
        f"size({v}) >= {n}",
        f"size({v}) <= {n + most}",
        f"(size({v}) - {n}) % {width} == 0",
        f"{at}.all(i, i >= size({v}) || {v}[i].matches("
        f"i < {n} ? {words}[i] : {words}Group[(i - {n}) % {width}]))",
    ]
    return " && ".join([*terms, *nodes])


def describe(layouts: Sequence[Layout]) -> str:
    """The layouts as a refusal message shows them: values by their pattern's name."""
    names = {
        NODE: "<node>",
        PCI: "<pci>",
        XID: "<xid>",
        UUID: "<uuid>",
        COUNT: "<n>",
        GPUS: "<gpus>",
        SECONDS: "<s>",
        SIZE: "<size>",
        RATIO: "<ratio>",
        XID_LIST: "<xids>",
        VERSION: "<version>",
        CIDRS: "<cidrs>",
        GPU_UUID: "<GPU-uuid>",
        AGENT_INTERVAL: "--interval-s=<s>",
        AGENT_PLATFORM: "--platform=rke2|other|auto",
        AGENT_PROXY: "--kube-proxy-mode=ipvs|iptables|nftables|none|auto",
        AGENT_DNS: "--allowed-dns=<cidrs>",
        AGENT_RESOLV: "--resolv-conf=<file>",
        ALLREDUCE: "--[no-]allreduce",
        LINK: "<pci>=<speed>GT/s,x<width>",
    }

    def word(t: Token) -> str:
        if isinstance(t, Repeat):
            return f"[{' '.join(word(g) for g in t.group)}]*{t.most}"
        return t if isinstance(t, str) else names[t.pattern]

    return " | ".join(" ".join(word(t) for t in layout) for layout in layouts)
