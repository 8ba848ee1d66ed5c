"""What README.md and docs/*.md point at exists: relative links and their anchors, repo paths,
cited tests, `make` targets, `gpu-node-guard` subcommands and their flags, `GUARD_*` variables,
Event reasons and node annotation keys. An operator copies these; a rename in the code that
leaves a doc behind fails here with the doc's name and the stale reference."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import click
import pytest

from guard.apply.events import ACTIONS
from guard.cli import cli, command_paths
from guard.doors.lease import slot_key
from guard.names import REPORTING_CONTROLLER, AnnotationKey, Annotations
from guard.settings import CRONJOB_ENV, SITE_SETTINGS, Settings
from tests.pysource import parse
from tests.unit.test_runbook import github_slug

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
# A repo path as the docs write it; `<site>`, `…` and `*` mark a placeholder, not a file.
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:guard|tests|hack|manifests|policies|docs|bench)/[\w./<>…*{}-]*)"
)
PLACEHOLDER = re.compile(r"[<…*{]")
TEST_NAME = re.compile(r"(?<![\w.])(test_\w+)\b(?!\.py)")
CITED_TEST = re.compile(r"([\w/]+\.py)::(test_\w+)")
MAKE = re.compile(r"`make ([a-z][a-z-]*)")
MAKE_LINE = re.compile(r"^\s*(?:\$ )?make ([a-z][a-z-]*)", re.M)  # in a fenced block
COMMAND = re.compile(r"gpu-node-guard((?: [a-z][a-z-]*)+)([^`|\n]*)")
FLAG = re.compile(r"(?<![\w-])(--?[a-z][a-z0-9-]*)")


def doc_ids() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in DOCS]


def text_of(doc: str) -> str:
    return (ROOT / doc).read_text(encoding="utf-8")


def prose(doc: str) -> str:
    """The doc without its fenced blocks (a `#` comment there is no heading, a link no link)."""
    return FENCE.sub("", text_of(doc))


def anchors(path: Path) -> set[str]:
    """The heading anchors GitHub gives `path`: a repeated heading gets -1, -2, …"""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?)#*$", FENCE.sub("", path.read_text("utf-8")), re.M):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
        slug = github_slug(text)
        n = seen.get(slug)
        seen[slug] = 0 if n is None else n + 1
        out.add(slug if n is None else f"{slug}-{n + 1}")
    return out


def links(doc: str) -> Iterator[str]:
    for target in re.findall(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)", prose(doc)):
        if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, …
            yield target


@pytest.mark.parametrize("doc", doc_ids())
def test_every_relative_link_and_anchor_resolves(doc: str) -> None:
    broken = []
    for target in links(doc):
        path, _, anchor = target.partition("#")
        file = (ROOT / doc).parent / path if path else ROOT / doc
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("doc", doc_ids())
def test_every_repo_path_exists(doc: str) -> None:
    missing = set()
    for raw in REPO_PATH.findall(text_of(doc)):
        path = raw.rstrip(".,;:")
        if not PLACEHOLDER.search(path) and not (ROOT / path).exists():
            missing.add(path)
    assert missing == set()


@cache
def defined_tests() -> dict[str, frozenset[str]]:
    """Test function (and class) name → the files under tests/ that define it."""
    found: dict[str, set[str]] = {}
    for file in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(parse(file.read_text("utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.setdefault(node.name, set()).add(file.relative_to(ROOT).as_posix())
    return {name: frozenset(files) for name, files in found.items()}


@pytest.mark.parametrize("doc", doc_ids())
def test_every_cited_test_exists(doc: str) -> None:
    text = text_of(doc)
    tests, files = defined_tests(), {p.stem for p in (ROOT / "tests").rglob("test_*.py")}
    missing = {n for n in TEST_NAME.findall(text) if n not in tests and n not in files}
    elsewhere = {
        f"{file}::{name}"
        for file, name in CITED_TEST.findall(text)
        if name in tests and not any(f.endswith(file) for f in tests[name])
    }
    assert (missing, elsewhere) == (set(), set())


@pytest.mark.parametrize("doc", doc_ids())
def test_every_make_target_exists(doc: str) -> None:
    makefile = (ROOT / "Makefile").read_text("utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.M))
    text = text_of(doc)
    cited = {
        *MAKE.findall(text),
        *(t for block in FENCE.findall(text) for t in MAKE_LINE.findall(block)),
    }
    assert cited - targets == set()


@cache
def commands() -> dict[tuple[str, ...], click.Command]:
    """Each subcommand, by the words a person types."""
    root = click.Context(cli, info_name="gpu-node-guard")
    out = {}
    for path in command_paths(cli):
        command: click.Command | None = cli
        ctx = root
        for word in path:
            assert isinstance(command, click.Group)
            command = command.get_command(ctx, word)
            assert command is not None
            ctx = click.Context(command, info_name=word, parent=ctx)
        assert command is not None
        out[path] = command
    return out


def flags(path: tuple[str, ...]) -> set[str]:
    found = {"-h", "--help"}
    for param in commands()[path].params:
        found.update(param.opts, param.secondary_opts)
    return found


def environment() -> set[str]:
    """Every GUARD_* variable a command reads: one per site setting and per value of the
    CronJob's own, and the Job programs' own (a fixed value is none)."""
    names = {"GUARD_" + n.upper() for n in (*SITE_SETTINGS, *CRONJOB_ENV)}
    for command in commands().values():
        for param in command.params:
            env = getattr(param, "envvar", None)
            names.update([env] if isinstance(env, str) else env or [])
    return names


# Variables the docs name as never read (the host write is asked for on the command line only).
NOT_READ = {"GUARD_CONFORMANCE_FIX"}


@pytest.mark.parametrize("doc", doc_ids())
def test_every_command_and_flag_exists(doc: str) -> None:
    """`gpu-node-guard <sub> --flag …` in a doc: the longest run of words that names a command,
    then every flag up to the end of the code span or table cell is one that command takes."""
    text = re.sub(r"\\\n\s*", " ", text_of(doc))  # a shell line continued with `\`
    unknown = set()
    for words, rest in COMMAND.findall(text):
        path: tuple[str, ...] = ()
        for word in words.split():
            if (*path, word) not in commands():
                break
            path = (*path, word)
        if path:
            tail = " ".join(words.split()[len(path) :]) + rest
            unknown.update(
                f"{' '.join(path)} {f}" for f in FLAG.findall(tail) if f not in flags(path)
            )
    assert unknown == set()


@pytest.mark.parametrize("doc", doc_ids())
def test_every_guard_variable_exists(doc: str) -> None:
    """A `GUARD_*` name is read by a command; `GUARD_<NAME>`, `GUARD_AGENT_<OPTION>` and
    `GUARD_PROMETHEUS_*_FILE` are patterns (no whole name) and pass."""
    named = set(re.findall(r"\b(GUARD_[A-Z0-9_]*[A-Z0-9])\b", text_of(doc)))
    known = environment()
    assert NOT_READ.isdisjoint(known)
    assert named - known - NOT_READ == set()


def event_reasons(text: str) -> set[str]:
    return set(re.findall(r"\b(Guard[A-Z][A-Za-z]+)\b", text))


@pytest.mark.parametrize("doc", doc_ids())
def test_every_event_reason_is_one_the_guard_emits(doc: str) -> None:
    assert event_reasons(text_of(doc)) - set(ACTIONS) == set()


@pytest.mark.parametrize("doc", doc_ids())
def test_every_annotation_key_is_the_guards(doc: str) -> None:
    """Keys under the default prefix: `Annotations`, the Jobs' node label, the onboarding taint,
    the cycle Lease's slot record."""
    prefix = Settings().annotation_prefix
    names = Annotations(prefix)
    keys = {
        getattr(names, n)
        for n in dir(Annotations)
        if isinstance(getattr(Annotations, n, None), property | AnnotationKey)
        and isinstance(getattr(names, n), str)
    }
    keys |= {Settings().onboarding_taint.partition("=")[0], REPORTING_CONTROLLER, slot_key(prefix)}
    cited = {
        prefix + k.rstrip("-")
        for k in re.findall(re.escape(prefix) + r"([a-z][a-z0-9-]*)", text_of(doc))
    }
    assert cited - keys == set()
