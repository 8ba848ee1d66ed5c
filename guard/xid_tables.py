"""The two bundled tables: NVIDIA's Xid catalog and the guard's Xid → verdict mapping, validated
hard (a broken row stops the program with one line naming the file and line, STYLE §6)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path

from guard.files import SMALL_TEXT_MAX_BYTES, FileInputError, read_text_bounded

DATA_DIR = Path(__file__).resolve().parent / "data"
CLASSES_FILE = DATA_DIR / "xid-classes.tsv"
CATALOG_FILE = DATA_DIR / "xid-catalog.tsv"


class Repair(StrEnum):
    """The evidence verdict: the repair on-call asks for, in precedence order (first wins); not
    the load test's pass or fail (`guard.loadtest.verdict.Verdict`)."""

    POWER_CYCLE = "power-cycle"
    RMA = "rma"
    RESET = "reset"
    HUMAN = "human"


class DataFileError(ValueError):
    """A bundled or configured table is broken; the message is one line with file and line."""


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    code: int
    mnemonic: str
    description: str
    immediate_action: str
    investigatory_action: str


@dataclass(frozen=True, slots=True)
class XidClasses:
    """Code → verdict; codes not listed are `human`."""

    classes: Mapping[int, Repair]

    def verdict_of(self, code: int) -> Repair:
        return self.classes.get(code, Repair.HUMAN)

    def isolating(self) -> tuple[int, ...]:
        """The codes whose repair is more than a GPU reset (power-cycle, rma): hardware for
        certain, so on a DRA node, which exports no GPU loss, the Xid held alone is the loss."""
        hard = (Repair.POWER_CYCLE, Repair.RMA)
        return tuple(sorted(code for code, repair in self.classes.items() if repair in hard))


def _rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for each data line of a TSV whose header names `columns` (at least)."""
    try:  # bounded, regular files only: a FIFO or /dev/zero given as --xid-classes
        text = read_text_bounded(path, SMALL_TEXT_MAX_BYTES, "table")
    except FileInputError as err:
        raise DataFileError(str(err)) from None
    header: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if header is None:
            missing = [c for c in columns if c not in cells]
            if missing:
                raise DataFileError(f"{path}:{number}: header lacks column(s) {', '.join(missing)}")
            header = cells
            continue
        if len(cells) < len(header):
            raise DataFileError(
                f"{path}:{number}: {len(cells)} column(s), header has {len(header)}"
            )
        yield number, dict(zip(header, cells, strict=False))
    if header is None:
        raise DataFileError(f"{path}: no header line")


def _code(path: Path, number: int, text: str, seen: set[int]) -> int:
    if not text.strip().isdigit():
        raise DataFileError(f"{path}:{number}: Xid code {text!r} is not a number")
    code = int(text)
    if code in seen:
        raise DataFileError(f"{path}:{number}: duplicate Xid code {code}")
    seen.add(code)
    return code


def load_classes(path: Path = CLASSES_FILE) -> XidClasses:
    """Read the verdict mapping; raises DataFileError with file:line on any problem."""
    allowed = ", ".join(v.value for v in Repair)
    seen: set[int] = set()
    classes: dict[int, Repair] = {}
    for number, row in _rows(path, ("xid", "verdict")):
        code = _code(path, number, row["xid"], seen)
        try:
            classes[code] = Repair(row["verdict"].strip())
        except ValueError:
            raise DataFileError(
                f"{path}:{number}: unknown verdict {row['verdict']!r} (expected one of {allowed})"
            ) from None
    return XidClasses(classes)


@cache
def bundled_classes() -> XidClasses:
    """The bundled verdict table, read once (the guard's queries are made from it)."""
    return load_classes()


_CATALOG_COLUMNS = ("xid", "mnemonic", "description", "immediate_action", "investigatory_action")


def load_catalog(path: Path = CATALOG_FILE) -> dict[int, CatalogEntry]:
    """Read NVIDIA's catalog table (converted from the catalog spreadsheet)."""
    seen: set[int] = set()
    catalog: dict[int, CatalogEntry] = {}
    for number, row in _rows(path, _CATALOG_COLUMNS):
        code = _code(path, number, row["xid"], seen)
        catalog[code] = CatalogEntry(code, *(row[c] for c in _CATALOG_COLUMNS[1:]))
    return catalog
