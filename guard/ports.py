"""A free TCP port on 127.0.0.1: for the local servers of the built-in example and the tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on right now (the kernel's choice; closed again on return).

    >>> 0 < free_port() < 65536
    True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
