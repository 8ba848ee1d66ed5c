"""Read (and, for --fix, write) host files under a root directory, resolving symlinks inside the
root as a chroot would (through ``/proc/1/root`` the kernel would use the container's root)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypeVar

from guard.doors.hostexec import Unknown

T = TypeVar("T")

MAX_SYMLINKS = 40


def _parts(path: str) -> list[str]:
    return [p for p in PurePosixPath(path).parts if p not in ("/", "", ".")]


@dataclass(frozen=True, slots=True)
class HostFS:
    root: Path

    def resolve(self, host_path: str) -> Path:
        """The real path of `host_path`, following every symlink inside the root."""
        pending = _parts(host_path)
        done: list[str] = []
        hops = 0
        while pending:
            name = pending.pop(0)
            if name == "..":
                done = done[:-1]
                continue
            candidate = self.root.joinpath(*done, name)
            if not candidate.is_symlink():
                done.append(name)
                continue
            hops += 1
            if hops > MAX_SYMLINKS:
                raise OSError(errno.ELOOP, "too many symlinks", host_path)
            target = os.readlink(candidate)
            if target.startswith("/"):
                done = []
            pending = _parts(target) + pending
        return self.root.joinpath(*done)

    def read_text(self, host_path: str) -> str | None:
        """File contents, or None when it does not exist; other OSErrors propagate."""
        try:
            return self.resolve(host_path).read_text(errors="replace")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def exists(self, host_path: str) -> bool:
        try:
            return self.resolve(host_path).exists()
        except OSError:
            return False

    def listdir(self, host_path: str) -> tuple[str, ...]:
        """Sorted entry names; empty when the directory does not exist."""
        try:
            return tuple(sorted(os.listdir(self.resolve(host_path))))
        except (FileNotFoundError, NotADirectoryError):
            return ()

    def readlink(self, host_path: str) -> str | None:
        """The link target of the last component (not followed), or None when not a symlink."""
        parent, name = os.path.split(host_path.rstrip("/"))
        link = self.resolve(parent) / name
        return os.readlink(link) if link.is_symlink() else None

    def write_new(self, host_path: str, text: str) -> None:
        """Create a file that must not exist yet (FileExistsError otherwise) and its directories."""
        parent, name = os.path.split(host_path)
        directory = self.resolve(parent)
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / name, "x", encoding="utf-8") as fh:
            fh.write(text)


def guarded(read: Callable[[], T], what: str) -> T | Unknown:
    """Run a reader; an OSError (permission, I/O, symlink loop) becomes an Unknown fact."""
    try:
        return read()
    except OSError as exc:
        return Unknown(f"reading {what}", str(exc.strerror or exc))
