"""An API key the cell's server requires: named in the config (`engines.<name>.api_key_env`, the
environment variable that holds it), read from the environment only, and held in memory for the
harness's own requests (readiness probe, `/props`, `/metrics`, `/tokenize`). Its value never
enters the config, Snakemake params, an argv, a log or a result file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from ..vocabulary import Cell

_KEY: str | None = None


class MissingSecretError(RuntimeError):
    """The config names an environment variable for a key, and it is not set."""


def secret_from_env(variable: str | None, where: str) -> str | None:
    """The value of `variable` (None when no variable is named); unset or empty fails."""
    if not variable:
        return None
    value = os.environ.get(variable)
    if not value:
        raise MissingSecretError(
            f"config key '{where}': environment variable {variable} is not set"
        )
    return value


def engine_api_key(cell: Cell) -> str | None:
    """The key the cell's server is started with."""
    return secret_from_env(
        cell.engine_spec.get("api_key_env"), f"engines.{cell.engine}.api_key_env"
    )


def client_api_key(cell: Cell) -> str | None:
    """The key the load generator sends: the workload's own variable when it names one (a
    client may be meant to send another key, or none), else the server's."""
    variable = cell.workload_spec.api_key_env
    if variable:
        return os.environ.get(variable) or None
    return engine_api_key(cell)


@contextlib.contextmanager
def server_api_key(key: str | None) -> Iterator[None]:
    """Within: the harness's requests to the server carry `key` (see `auth_headers`)."""
    global _KEY
    previous, _KEY = _KEY, key
    try:
        yield
    finally:
        _KEY = previous


def auth_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {_KEY}"} if _KEY else {}
