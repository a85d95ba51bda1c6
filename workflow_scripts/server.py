"""Launch a server in its own process group, wait until it is ready while checking it is alive,
and tear the whole group down on success, failure, Ctrl-C and SIGTERM."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests

PR_SET_PDEATHSIG = 1


class ServerError(RuntimeError):
    """The server died, never became ready, or could not be started."""


def _die_with_parent() -> None:
    """In the child: be killed if the process that started us dies (even by SIGKILL)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now; the kernel picks it, so parallel cells do not collide."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host if host != "0.0.0.0" else "127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: str | Path, lines: int = 20) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class ServerProcess:
    argv: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    stop_argv: list[str] | None = None  # e.g. `docker rm -f NAME` for a container
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                    env={**os.environ, **(self.env or {})},
                )
            except OSError as exc:
                raise ServerError(f"could not start {self.argv[0]}: {exc}") from exc

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the group, then SIGKILL what is left; idempotent."""
        if self.stop_argv:
            with contextlib.suppress(Exception):
                subprocess.run(self.stop_argv, capture_output=True, timeout=timeout_s)
        if self.proc is None:
            return
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout_s)

    def died_message(self) -> str:
        code = self.proc.returncode if self.proc else None
        return (
            f"server exited with code {code} before it was ready; last log lines:\n"
            f"{tail(self.log_path)}"
        )


def wait_ready(
    server: ServerProcess,
    base_url: str,
    health_path: str,
    timeout_s: float,
    probe_body: dict | None = None,
    headers: dict | None = None,
) -> float:
    """Poll `health_path` until 200, then send one tiny completion; fail fast if the process
    dies; give up after `timeout_s` (a server that listens but never answers is caught here)."""
    start = time.monotonic()
    deadline = start + timeout_s
    session = requests.Session()
    healthy = False
    last = "no answer yet"
    while time.monotonic() < deadline:
        if not server.alive():
            raise ServerError(server.died_message())
        remaining = max(0.1, deadline - time.monotonic())
        try:
            if not healthy:
                resp = session.get(base_url + health_path, timeout=min(5.0, remaining))
                healthy = resp.status_code == 200
                last = f"{health_path} answered {resp.status_code}"
            if healthy:
                if probe_body is None:
                    return time.monotonic() - start
                resp = session.post(
                    base_url + "/v1/chat/completions",
                    json=probe_body,
                    headers=headers or {},
                    timeout=min(30.0, remaining),
                )
                if resp.status_code == 200:
                    return time.monotonic() - start
                last = f"probe completion answered {resp.status_code}: {resp.text[:200]}"
        except requests.RequestException as exc:
            last = f"{type(exc).__name__}"
        time.sleep(0.25)
    raise ServerError(
        f"server not ready after {timeout_s:.0f} s ({last}); last log lines:\n"
        f"{tail(server.log_path)}"
    )


class _Terminated(BaseException):
    """Raised in the main thread on SIGTERM so `finally` blocks run."""


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM (and SIGHUP) into an exception for the duration, so teardown runs."""

    def handler(signum, frame):
        raise _Terminated(f"signal {signum}")

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


@contextlib.contextmanager
def running(server: ServerProcess) -> Iterator[ServerProcess]:
    """Start the server; whatever happens inside, tear its process group down."""
    try:
        server.start()
        yield server
    finally:
        server.stop()
