"""Config checks the schema cannot say: the config's size once aliases are expanded and its
numbers finite (before it is copied), each engine setting in the shape its adapter renders, the
listen address set in one place only, each cell's weights in a format its engine reads, a
conversation's think time within its time cap, and each id short enough for the file names made
from it. Every refusal names its key path, before anything is downloaded or built."""

from __future__ import annotations

import ipaddress
import json
import math
import shlex
import sys
from typing import Any

from ..engines import adapter_for, known_kinds
from ..engines.base import EngineAdapter
from ..loadgen.prompts import think_time_alone_s
from ..vocabulary import Cell, ConfigError
from ..weights import derive
from .bounded_yaml import MAX_NODES

MAX_VALUES = MAX_NODES
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
# Hosts already warned about in this process (validate_config runs at every Snakefile parse).
_WARNED_HOSTS: set[str] = set()
FORMAT_NAMES = {"gguf": "a GGUF file", "hf": "a Hugging Face folder or safetensors file"}
ENGINE_READS = {"gguf": "GGUF files", "hf": "Hugging Face folders (safetensors)"}
NAME_MAX_BYTES = 255  # the longest file name ext4, xfs, btrfs and tmpfs take (NAME_MAX)
# What the pipeline adds to an id in a file name, at most: a shared series' launch file written
# atomically (`.<series>.launch.json.<8 random>.tmp`, atomic.atomic_open).
ID_NAME_ROOM = len("..launch.json.XXXXXXXX.tmp")


def key_path(parts: list[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top>"


def value_count(value: Any, bound: int = MAX_VALUES) -> int:
    """Values in `value` with every shared object counted where it appears (as a copy would
    hold them); stops counting past `bound`."""
    count, stack = 0, [value]
    while stack and count <= bound:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return count


def check_values(config: dict[str, Any]) -> None:
    """Refuse a config past MAX_VALUES values (a loader that expanded an alias bomb hands it
    over whole: Snakemake's) or holding a non-finite number (`.inf`, `.nan`) anywhere."""
    count, stack = 0, [((), config)]
    while stack:
        path, item = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(
                f"config: more than {MAX_VALUES} values once YAML aliases are expanded (an "
                "alias bomb?); write the values out, or alias less"
            )
        if isinstance(item, dict):
            stack.extend(((*path, key), value) for key, value in item.items())
        elif isinstance(item, list | tuple):
            stack.extend(((*path, index), value) for index, value in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            raise ConfigError(f"config key '{key_path(list(path))}': {item} is not a finite number")


# -- settings -------------------------------------------------------------------------------

_TYPE_CHECKS = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
}
_ARTICLE = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "a boolean",
}


def check_settings(adapter: EngineAdapter, settings: Any, where: str) -> None:
    """Each setting the adapter renders itself in the shape it renders (`port: true` is no
    port 1: a boolean is never a number), and no `host`: the listen address is the config's."""
    if not isinstance(settings, dict):
        return
    for key, value in settings.items():
        if key == "host":
            raise _host_elsewhere(f"{where}.host")
        types = adapter.setting_types.get(key)
        if value is None or types is None:
            continue  # null leaves the flag out; the rest go through flag_args as they are
        if not any(_TYPE_CHECKS[t](value) for t in types):
            wanted = " or ".join(_ARTICLE[t] for t in types)
            shown = json.dumps(value)[:60]
            why = " (a boolean is not a number)" if isinstance(value, bool) else ""
            raise ConfigError(
                f"config key '{where}.{key}': {adapter.kind} takes {wanted} here, not {shown}{why}"
            )


# -- the listen address ----------------------------------------------------------------------


def _host_elsewhere(where: str) -> ConfigError:
    return ConfigError(
        f"config key '{where}': the address servers listen on is the top-level 'host' key's "
        "alone (default 127.0.0.1, loopback); remove it here, and set the top-level 'host' to "
        "listen elsewhere"
    )


def _flag_name(arg: str) -> tuple[str, str | None]:
    name, eq, value = arg.partition("=")
    return name, (value if eq else None)


def check_engine_args(args: Any, where: str) -> None:
    """No `--host` among an engine's own flags."""
    for index, arg in enumerate(args if isinstance(args, list) else []):
        if _flag_name(str(arg))[0] == "--host":
            raise _host_elsewhere(f"{where}[{index}]")


def check_docker_args(args: Any, where: str) -> None:
    """No port publishing (`-p`, `-P`) and no host network among docker's options: the
    pipeline publishes the server's port on the configured host, and a container on the host
    network listens on every address."""
    words = [str(a) for a in args] if isinstance(args, list) else []
    for index, arg in enumerate(words):
        name, value = _flag_name(arg)
        if name in ("-p", "--publish", "-P", "--publish-all") or (
            arg.startswith("-p") and not arg.startswith("--") and len(arg) > 2
        ):
            raise _host_elsewhere(f"{where}[{index}]")
        if name in ("--network", "--net"):
            following = words[index + 1] if index + 1 < len(words) else ""
            if (value if value is not None else following) == "host":
                raise _host_elsewhere(f"{where}[{index}]")


def check_engine(name: str, engine: dict[str, Any]) -> None:
    """An engine's settings in their adapter's shapes, and no listen address but the config's."""
    where = f"engines.{name}"
    check_settings(adapter_for(engine["kind"]), engine.get("settings"), f"{where}.settings")
    check_engine_args(engine.get("extra_args"), f"{where}.extra_args")
    if isinstance(engine.get("binary"), str):
        try:
            words = shlex.split(engine["binary"])
        except ValueError:
            words = engine["binary"].split()
        if any(_flag_name(w)[0] == "--host" for w in words):
            raise _host_elsewhere(f"{where}.binary")
    docker = engine.get("docker") or {}
    for key in ("options", "extra_args"):
        check_docker_args(docker.get(key), f"{where}.docker.{key}")
    check_engine_args(docker.get("command"), f"{where}.docker.command")


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_if_exposed(host: str) -> None:
    """A line on stderr, once per process, when servers will listen beyond this machine."""
    if is_loopback(host) or host in _WARNED_HOSTS:
        return
    _WARNED_HOSTS.add(host)
    print(
        f"warning: servers will listen on {host}, which is not a loopback address: anyone who "
        "can reach this machine can send them requests (config key 'host')",
        file=sys.stderr,
    )


# -- cells: their settings, and weights their engine reads ---------------------------------------


def format_problem(adapter: EngineAdapter, weights: dict[str, Any]) -> str | None:
    """Why the engine cannot load these weights, or None (also when only the fetched files
    could tell their format)."""
    found = derive.weights_format(weights)
    if not adapter.weight_formats or not found:
        return None
    if found not in adapter.weight_formats:
        reads = " or ".join(ENGINE_READS[f] for f in sorted(adapter.weight_formats))
        return f"reads {reads}, and this quant is {FORMAT_NAMES[found]}"
    if found == "gguf" and weights.get("source") == "hf" and adapter.prefers_hub_id:
        return (
            "gets a hub entry as its repo id, which loads as a Hugging Face model, and this "
            "quant is a GGUF file in the repo"
        )
    return None


def check_cells(config: dict[str, Any]) -> None:
    """A cells entry's settings in its engine's shapes."""
    for index, entry in enumerate(config["cells"]):
        engine = config["engines"].get(entry.get("engine"))
        if "settings" in entry and engine and engine["kind"] in known_kinds():
            where = f"cells[{index}].settings"
            check_settings(adapter_for(engine["kind"]), entry["settings"], where)


def check_weights_format(cell: Cell, where: str) -> None:
    """A runnable cell's weights in a format its engine reads (a matrix without `quant:` takes
    every quant of a model): called as each cell is resolved, before anything runs."""
    problem = format_problem(adapter_for(cell.engine_kind), cell.weights)
    if problem is None:
        return
    fix = (
        "list the quants this engine reads in the matrix's `quant:` (or `exclude` the pair)"
        if where.endswith(".matrix")
        else "name a quant this engine reads"
    )
    raise ConfigError(
        f"config key '{where}': cell '{cell.id}': engine '{cell.engine}' ({cell.engine_kind}) "
        f"{problem} (quant '{cell.quant}' of model '{cell.model}'); {fix}"
    )


def check_id_length(cell_id: str, where: str, what: str = "cell id") -> None:
    """A cell, series or probe id whose file names (its folder, `<id>.count`, `<id>.log`, a
    shared series' `.<id>.launch.json.XXXXXXXX.tmp` while it is written) fit in a file name."""
    size = len(cell_id.encode("utf-8"))
    if size + ID_NAME_ROOM > NAME_MAX_BYTES:
        raise ConfigError(
            f"config key '{where}': {what} '{cell_id}' is {size} bytes; a file name holds at "
            f"most {NAME_MAX_BYTES} and the files named after an id add up to {ID_NAME_ROOM} "
            f"more ('.<id>.launch.json.XXXXXXXX.tmp'), so an id may be at most "
            f"{NAME_MAX_BYTES - ID_NAME_ROOM} bytes: shorten the model, engine, quant, drafter "
            "or workload name"
        )


def check_known(kind: str, name: str, known: dict, where: str) -> None:
    if name not in known:
        options = ", ".join(sorted(known)) or "none defined"
        raise ConfigError(f"config key '{where}': unknown {kind} '{name}' (known: {options})")


def plain_copy(value: Any) -> Any:
    """A deep copy as plain dicts and lists (Snakemake hands JSON configs over as OrderedDicts)."""
    return json.loads(json.dumps(value))


def check_think_time(name: str, workload: dict[str, Any]) -> None:
    """A conversation's think time alone must fit in `max_seconds`: refused when it reaches the
    cap (`think_time_alone_s`), for then no conversation's last turn could be sent."""
    dataset = workload.get("dataset") or {}
    cap_s, think_s, turns = (
        workload.get("max_seconds"),
        dataset.get("think_time_s"),
        dataset.get("max_turns"),
    )
    if not dataset.get("conversations") or not cap_s or not think_s:
        return
    alone_s = think_time_alone_s(think_s, turns)
    if alone_s < cap_s:
        return
    gaps = turns - 1 if turns else 1
    counted = f"max_turns {turns}" if turns else "max_turns unset: at least two turns"
    raise ConfigError(
        f"config key 'workloads.{name}.dataset.think_time_s': {think_s:g} s x {gaps} "
        f"gap{'s' if gaps > 1 else ''} between turns ({counted}) = {alone_s:g} s of think time "
        f"alone, at or past workloads.{name}.max_seconds ({cap_s:g} s): the time cap would cut "
        "every conversation before its last turn (lower think_time_s or max_turns, or raise "
        "max_seconds)"
    )
