"""Config mutations for the malformed-config tests: each returns a function that edits a config
in place at a key path."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def default_config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def _parent(config, path):
    node = config
    for key in path[:-1]:
        node = node[key]
    return node


def setter(path, value):
    def mutate(config):
        _parent(config, path)[path[-1]] = value

    return mutate


def deleter(path):
    def mutate(config):
        del _parent(config, path)[path[-1]]

    return mutate
