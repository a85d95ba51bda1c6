"""No secret in a config: every place a config puts text on a server's command line or into
its environment (settings become flags, extra_args and docker options are argv, env values reach
`docker run -e`), and the names and dataset paths that reach cell ids, the client's command line
and the report, is searched for a secret's name or a secret's shape, before the schema check
(whose messages quote values), so the refusal is the first thing said and it repeats no secret.

A secret written there would be printed by `plan`, recorded in metrics.json, server.log and the
card, kept in Snakemake's params, and visible to every user in /proc/<pid>/cmdline.
"""

from __future__ import annotations

import shlex
from typing import Any

from ..redact import secret_name, secret_text
from ..vocabulary import ConfigError

HOW_INSTEAD = (
    "a secret is never a config value (plan prints it; metrics.json, server.log, the card and "
    "the process list record it): set it in the environment and name the variable in "
    "api_key_env (an API key the server requires), or export HF_TOKEN (a hub token, read from "
    "the environment)"
)


def _refuse(where: str, what: str) -> ConfigError:
    return ConfigError(f"config key '{where}': {what}; {HOW_INSTEAD}")


def _items(value: Any) -> list[tuple[Any, Any]]:
    return list(value.items()) if isinstance(value, dict) else []


def check_value(value: Any, where: str) -> None:
    """A setting: no key named like a secret, no string shaped like one, at any depth (a
    mapping or list setting becomes a JSON flag value)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if secret_name(str(key)):
                raise _refuse(f"{where}.{key}", "a setting named like a secret")
            check_value(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_value(item, f"{where}[{index}]")
    elif isinstance(value, str):
        what = secret_text(value)
        if what:
            raise _refuse(where, what)


def arg_problem(arg: str) -> str | None:
    """What makes one command-line word a secret's: a flag named like one (`--api-key`,
    `--hf-token=...`) or a value shaped like one (`Authorization: Bearer ...`, `HF_TOKEN=...`
    for `docker -e`); None for any other word."""
    name, eq, value = arg.lstrip("-").partition("=")
    if arg.startswith("-") and secret_name(name):
        return f"the flag --{name} passes a secret on argv"
    return secret_text(value) if arg.startswith("-") and eq else secret_text(arg)


def check_args(args: Any, where: str) -> None:
    if not isinstance(args, list):
        return
    for index, arg in enumerate(args):
        what = arg_problem(str(arg))
        if what:
            raise _refuse(f"{where}[{index}]", what)


def _check_program(program: Any, where: str) -> None:
    """`binary` is split like a shell line (`python3 -m sglang.launch_server ...`)."""
    if not isinstance(program, str):
        return
    try:
        words = shlex.split(program)
    except ValueError:
        words = program.split()
    for word in words:
        what = arg_problem(word)
        if what:
            raise _refuse(where, what)


def _check_env(env: Any, where: str) -> None:
    for variable, value in _items(env):
        if secret_name(str(variable)):
            raise _refuse(f"{where}.{variable}", "a variable named like a secret")
        what = secret_text(str(value))
        if what:
            raise _refuse(f"{where}.{variable}", what)


def _check_engine(name: str, engine: Any) -> None:
    if not isinstance(engine, dict):
        return
    where = f"engines.{name}"
    check_value(engine.get("settings"), f"{where}.settings")
    check_args(engine.get("extra_args"), f"{where}.extra_args")
    _check_env(engine.get("env"), f"{where}.env")
    _check_program(engine.get("binary"), f"{where}.binary")
    docker = engine.get("docker")
    if isinstance(docker, dict):
        for key in ("options", "extra_args", "command"):
            check_args(docker.get(key), f"{where}.docker.{key}")


def _check_names(config: dict[str, Any]) -> None:
    """A name of a model, quant, engine, drafter or workload is part of every cell id: it
    reaches the plan, the client's command line, folder names and the report. One shaped like a
    secret is named by its place, not by itself."""
    places = [(section, config.get(section)) for section in ("models", "engines", "drafters")]
    places.append(("workloads", config.get("workloads")))
    for model, entry in _items(config.get("models")):
        if isinstance(entry, dict):
            places.append((f"models.{model}.quants", entry.get("quants")))
    for where, section in places:
        for number, (name, _) in enumerate(_items(section), start=1):
            what = secret_text(str(name))
            if what:
                raise _refuse(f"{where} (name #{number})", f"a name: {what}")


def _check_datasets(workloads: Any) -> None:
    """A dataset's path reaches the client's command line, metrics.json and the report."""
    for name, workload in _items(workloads):
        dataset = workload.get("dataset") if isinstance(workload, dict) else None
        if isinstance(dataset, dict) and isinstance(dataset.get("path"), str):
            what = secret_text(dataset["path"])
            if what:
                raise _refuse(f"workloads.{name}.dataset.path", what)


def check_no_secrets(config: dict[str, Any]) -> None:
    """Refuse the first secret in names, engines, cells, drafters and dataset paths, naming its
    key path."""
    _check_names(config)
    _check_datasets(config.get("workloads"))
    for name, engine in _items(config.get("engines")):
        _check_engine(name, engine)
    cells = config.get("cells")
    for index, entry in enumerate(cells if isinstance(cells, list) else []):
        if isinstance(entry, dict):
            check_value(entry.get("settings"), f"cells[{index}].settings")
    for name, drafter in _items(config.get("drafters")):
        if not isinstance(drafter, dict):
            continue
        check_value(drafter.get("settings"), f"drafters.{name}.settings")
        for kind, spelling in _items(drafter.get("for_engine_kind")):
            if isinstance(spelling, dict):
                check_value(
                    spelling.get("settings"), f"drafters.{name}.for_engine_kind.{kind}.settings"
                )
