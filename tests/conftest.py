"""Shared fixtures. Append new fixtures below; do not rewrite the ones others rely on."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator

import pytest

from tests.support import http_standin

# --- load generator: stand-in HTTP servers on 127.0.0.1 (a real server cannot show every fault)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class StandinServers:
    """Raw asyncio TCP servers on 127.0.0.1, random ports, each on its own thread and loop, so
    a test can write exactly the bytes a fault needs. All are stopped when the test ends."""

    def __init__(self) -> None:
        self._running: list[tuple[asyncio.AbstractEventLoop, threading.Thread, object]] = []

    def start(self, handler: Handler) -> str:
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        box: dict = {}

        async def _open() -> None:
            async def guarded(reader, writer):
                try:
                    await handler(reader, writer)
                except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
                    pass  # the client went away, or the test is over
                finally:
                    writer.close()

            box["server"] = await asyncio.start_server(guarded, "127.0.0.1", 0)

        def _run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(_open())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        thread = threading.Thread(target=_run, daemon=True)
        thread.start()
        if not ready.wait(10):
            raise RuntimeError("stand-in server did not start")
        server = box["server"]
        self._running.append((loop, thread, server))
        port = server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def stop_all(self) -> None:
        for loop, thread, server in self._running:

            async def _close(server=server) -> None:
                server.close()
                for task in asyncio.all_tasks():
                    if task is not asyncio.current_task():
                        task.cancel()

            with contextlib.suppress(Exception):  # teardown goes on whatever happened
                asyncio.run_coroutine_threadsafe(_close(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
        self._running.clear()

    # -- helpers for handlers: the HTTP of tests/support/http_standin.py --------------------

    read_request = staticmethod(http_standin.read_request)
    sse_head = staticmethod(http_standin.sse_head)
    chunk = staticmethod(http_standin.chunk)
    event = staticmethod(http_standin.event)
    content = staticmethod(http_standin.content)

    @staticmethod
    def usage(prompt_tokens: int, completion_tokens: int) -> dict:
        return {
            "choices": [],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        }

    @classmethod
    def whole_stream(cls, texts: list[str], prompt_tokens: int = 5) -> bytes:
        """A complete, healthy streamed answer: content chunks, usage, [DONE], end of body."""
        out = b"".join(cls.event(cls.content(t)) for t in texts)
        out += cls.event(cls.usage(prompt_tokens, len(texts)))
        return out + cls.event(b"[DONE]") + cls.chunk(b"")


@pytest.fixture
def standin() -> Iterator[StandinServers]:
    servers = StandinServers()
    try:
        yield servers
    finally:
        servers.stop_all()


# --- signals: the Ctrl-C tests send SIGINT to the processes they start, and each inherits how
# this one treats it. Started in the background by a shell without job control (`cmd &` in a
# script, `nohup`), pytest runs with SIGINT ignored, so did every child, and those tests failed
# for that alone: the suite gives its children the default back.


def pytest_configure(config):
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# --- the DAG of a config, built where no run has left results


@pytest.fixture(scope="module")
def empty_workdir(tmp_path_factory):
    """An empty folder as the working directory for a module's tests: the DAG reads what the
    config's relative `results/` already holds (failure counts, the search's verdicts), and a run
    left in the checkout (CI's README run) must not move a test."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("workdir"))
        yield
