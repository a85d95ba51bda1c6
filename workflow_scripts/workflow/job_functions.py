"""The functions rules hand Snakemake per job (inputs, params, resources, group, threads), with
their signatures looked up once (`job_function`; a rule's declared resources:
`with_job_functions`). Snakemake inspects a job function's signature at every call, two
or three times per call (`snakemake.common.get_function_params`): at 1000 sweep points that is
3 % of a dry run's instructions. Its own helpers (`subpath`, `as_py_module`) set the signature
with `overwrite_function_params`; so does `job_function`. A Snakemake without that hook only
loses the saving (tests/workflow/test_job_functions.py checks the installed one has it)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

try:
    from snakemake.common import overwrite_function_params
except ImportError:  # pragma: no cover - a Snakemake without the hook
    overwrite_function_params = None

Function = TypeVar("Function", bound=Callable)


def job_function(function: Function) -> Function:
    """`function`, with its signature given to Snakemake once (a decorator). On a method, the
    signature less `self`: the bound method Snakemake calls reads its function's attributes."""
    if overwrite_function_params is not None:
        params = inspect.signature(function).parameters
        overwrite_function_params(function, {k: v for k, v in params.items() if k != "self"})
    return function


def with_job_functions(declared: dict[str, Any]) -> dict[str, Any]:
    """A rule's `resources:` (config.resources.declared_resources), each function of a job
    among them a `job_function`."""
    return {key: job_function(v) if callable(v) else v for key, v in declared.items()}
