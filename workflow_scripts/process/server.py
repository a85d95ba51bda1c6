"""Launch a server in its own process group, wait until it is ready while checking it is alive,
and tear the whole group down on success, failure, Ctrl-C and SIGTERM."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import requests

from ..exits import describe_exit
from ..text import tail
from . import leftovers
from .auth import auth_headers

PR_SET_PDEATHSIG = 1
CONTAINER_CHECK_INTERVAL_S = 1.0
RECORD_INTERVAL_S = 1.0  # how often the record follows the server's processes while watched
DOCKER_RUN_TIMEOUT_S = 600.0  # `docker run -d` may still be creating the container


class ServerError(RuntimeError):
    """The server died, never became ready, or could not be started."""


def die_with_parent() -> None:
    """In the child: be killed if the process that started us dies (even by SIGKILL)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class ServerProcess:
    """A server in its own process group; for a container, also its name-based stop and
    liveness commands (the docker client can outlive, or die before, the container). With a
    `record_path`, what it starts is on record there until a clean teardown, and its start ends
    what an earlier launch of that record left running (process.leftovers)."""

    argv: list[str]
    log_path: Path
    env: dict[str, str] | None = field(default=None, repr=False)  # may hold the API key
    stop_argv: list[str] | None = None  # e.g. `docker rm -f NAME` for a container
    alive_argv: list[str] | None = None  # e.g. `docker inspect -f {{.State.Running}} NAME`
    follow_argv: list[str] | None = None  # detached container: `docker logs -f NAME`
    container: str | None = None
    record_path: Path | None = None
    proc: subprocess.Popen | None = None
    _checked_at: float = field(default=0.0, repr=False)
    _recorded_at: float = field(default=0.0, repr=False)
    _recorded: tuple = field(default=(), repr=False)
    _seen_running: bool = field(default=False, repr=False)
    _container_note: str = field(default="", repr=False)

    @classmethod
    def for_command(cls, command, log_path: Path, record_path: Path | None = None) -> ServerProcess:
        """From a server's command (`serve.Command`: an engines.command.ServerCommand)."""
        return cls(
            list(command.argv),
            Path(log_path),
            env=command.env,
            stop_argv=command.stop_argv,
            alive_argv=command.alive_argv,
            follow_argv=command.follow_argv,
            container=getattr(command, "container", None),
            record_path=record_path,
        )

    def _run_quiet(self, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired):
            return None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.record_path is not None:
            leftovers.end_leftovers(self.record_path)
            self.note_running(force=True)  # the container's name, before it exists
        if self.stop_argv:
            self._run_quiet(self.stop_argv, 60)  # a container left by a killed run, same name
        argv = self.argv
        if self.follow_argv:
            self._start_detached()
            argv = self.follow_argv
        with open(self.log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(
                    argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=die_with_parent,
                    env={**os.environ, **(self.env or {})},
                )
            except OSError as exc:
                raise ServerError(f"could not start {argv[0]}: {exc}") from exc
        self.note_running(force=True)

    def note_running(self, force: bool = False) -> None:
        """Keep the record of what this server runs up to date: its process group and
        descendants, and its container (at most once a second unless forced; written only when
        something changed)."""
        if self.record_path is None:
            return
        now = time.monotonic()
        if not force and now - self._recorded_at < RECORD_INTERVAL_S:
            return
        self._recorded_at = now
        record = leftovers.record_of(self.pid, self.container)
        if (record.processes, record.container) != self._recorded:
            self._recorded = (record.processes, record.container)
            leftovers.write_record(self.record_path, record)

    def _start_detached(self) -> None:
        """`docker run -d`: wait for it to create the container; its output goes to the log."""
        try:
            done = subprocess.run(
                self.argv,
                capture_output=True,
                text=True,
                timeout=DOCKER_RUN_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})},
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServerError(f"could not start {self.argv[0]}: {exc}") from exc
        with open(self.log_path, "a") as log:
            log.write(done.stdout + done.stderr)
        if done.returncode != 0:
            raise ServerError(
                f"{' '.join(self.argv[:2])} {describe_exit(done.returncode)}; last log lines:\n"
                f"{tail(self.log_path)}"
            )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        """The process runs and, for a container, docker says it is running (checked at most
        once a second; a hung or exited container fails here, not at the readiness timeout)."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        self.note_running()
        if not self.alive_argv:
            return True
        now = time.monotonic()
        if now - self._checked_at < CONTAINER_CHECK_INTERVAL_S:
            return True
        self._checked_at = now
        done = self._run_quiet(self.alive_argv, 30)
        if done is None:
            return True  # docker itself did not answer in time: no verdict on the container
        if done.returncode == 0 and done.stdout.strip() == "true":
            self._seen_running = True
            return True
        self._container_note = (done.stdout + done.stderr).strip()[:200]
        # An attached `docker run` may still be creating the container: until it has been seen
        # running, the live client is the verdict (it exits if the container cannot start).
        return not (self._seen_running or self.follow_argv)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the group, then SIGKILL what is left; idempotent. An interruption on the way
        (a second Ctrl-C, SIGTERM) cuts the grace short, never the teardown: the group is
        SIGKILLed and reaped, then the interruption goes on up. The record, if any, is dropped
        once nothing it names runs."""
        interrupted: BaseException | None = None
        container_gone = not self.stop_argv
        if self.stop_argv:
            try:
                done = subprocess.run(self.stop_argv, capture_output=True, timeout=timeout_s)
                container_gone = done.returncode == 0 or b"No such container" in done.stderr
            except Exception:
                pass
            except BaseException as exc:
                interrupted = exc
        if self.proc is not None:
            pgid = self.proc.pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            if interrupted is None:
                try:
                    self.proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    pass
                except BaseException as exc:
                    interrupted = exc
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout_s)
        if self.record_path is not None and container_gone:
            leftovers.drop_record(self.record_path)
        if interrupted is not None:
            raise interrupted

    def died_message(self, when: str = "before it was ready") -> str:
        if self.proc is not None and self.follow_argv:
            # the log follower ends once it has copied the stopped container's last lines
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        code = self.proc.poll() if self.proc else None
        what = f"server {describe_exit(code)}"
        if self.alive_argv and (code is None or self.follow_argv):
            # the client (or the log follower) says little: the container's state says more
            what = f"container is not running ({self._container_note or 'state unknown'})"
        return f"{what} {when}; last log lines:\n{tail(self.log_path)}"


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
    session.headers.update(auth_headers() if headers is None else headers)
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
                    return _ready(server, start)
                resp = session.post(
                    base_url + "/v1/chat/completions",
                    json=probe_body,
                    timeout=min(30.0, remaining),
                )
                if resp.status_code == 200:
                    return _ready(server, start)
                last = f"probe completion answered {resp.status_code}: {resp.text[:200]}"
        except requests.RequestException as exc:
            last = f"{type(exc).__name__}"
        time.sleep(0.25)
    raise ServerError(
        f"server not ready after {timeout_s:.0f} s ({last}); last log lines:\n"
        f"{tail(server.log_path)}"
    )


def _ready(server: ServerProcess, start: float) -> float:
    """Seconds since `start`; the record names the server's processes as they are now (an
    engine starts its workers before it answers)."""
    ready_s = time.monotonic() - start
    server.note_running(force=True)
    return ready_s


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM so `finally` blocks run."""


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM (and SIGHUP) into an exception for the duration, so teardown runs."""

    fired = False

    def handler(signum, frame):
        nonlocal fired
        if fired:
            return  # teardown is under way: a second signal (forwarded, repeated) must not cut it
        fired = True
        raise Terminated(f"signal {signum}")

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
