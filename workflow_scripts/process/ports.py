"""Ports for servers: the engine's usual one when free, else one the kernel picks, held by a
node-local lock so two of our cells never bind the same one."""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .server import ServerError


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now; the kernel picks it, so parallel cells do not collide."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host if host != "0.0.0.0" else "127.0.0.1", 0))
        return sock.getsockname()[1]


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
        try:
            sock.bind((host or "0.0.0.0", port))
        except OSError:
            return False
    return True


@dataclass
class PortLease:
    """A port held for one cell: a lock file keeps our other cells off it while the server
    binds, and the lock dies with the process, however it ends."""

    port: int
    lock: IO | None = field(default=None, repr=False)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.close()
            self.lock = None

    def __enter__(self) -> PortLease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def _port_lock_dir() -> Path:
    """Node-local (ports belong to one machine, and flock is unreliable on shared filesystems):
    $XDG_RUNTIME_DIR, else the system temp dir, per user."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    folder = Path(base) / f"llmbench-ports-{os.getuid()}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def reserve_port(host: str = "127.0.0.1", preferred: int | None = None) -> PortLease:
    """The engine's usual port when it is free (so the command is the one users know), else
    one the kernel picks; never one another of our cells holds."""
    candidates = ([preferred] if preferred else []) + [None] * 20
    for candidate in candidates:
        port = candidate or free_port(host)
        lock = open(_port_lock_dir() / f"{port}.lock", "w")  # noqa: SIM115 - held on purpose
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        if _bindable(host, port):
            return PortLease(port, lock)
        lock.close()
    raise ServerError(f"no free port on {host}")
