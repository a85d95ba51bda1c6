"""A search as a validated config hands it over, without the rest of a config: what it states
over the schema's defaults (`$defs.search`), read by `SearchSettings.from_dict` as the matrix
reads it. The planner's tests take it; the config tests check the values themselves."""

from __future__ import annotations

from typing import Any

from workflow_scripts.config.schema import load_schema
from workflow_scripts.slo.search import SearchSettings

DEFAULTS = {
    name: sub["default"]
    for name, sub in load_schema()["$defs"]["search"]["properties"].items()
    if "default" in sub
}


def search_settings(**search: Any) -> SearchSettings:
    return SearchSettings.from_dict({**DEFAULTS, **search})
