"""The config's schema (schemas/config.schema.yaml), applied with its defaults filled in: every
value a schema can judge is judged here, once, and each refusal names its key path (a missing or
unknown key: its object's path, the message naming the key). What a schema cannot say (keys
judged together, names looked up elsewhere) is checked after it, in `matrix` and the modules it
calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..vocabulary import ConfigError
from .checks import key_path, plain_copy

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"
MAX_ERRORS = 10  # listed in one refusal

# libyaml's loader where PyYAML has it: the schema is read at every parse of the Snakefile.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_schema() -> dict:
    return yaml.load(SCHEMA_PATH.read_text(), Loader=_YAML_LOADER)


def _validator(schema: dict) -> jsonschema.Validator:
    """The schema's validator, which also fills each absent property's default in and counts as
    an integer only an int (`8.0` is no concurrency: JSON Schema counts it as one)."""
    base = jsonschema.validators.validator_for(schema)

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = plain_copy(sub["default"])
        yield from base.VALIDATORS["properties"](validator, properties, instance, schema)

    def is_int(checker, instance):
        return isinstance(instance, int) and not isinstance(instance, bool)

    extended = jsonschema.validators.extend(
        base,
        {"properties": set_defaults},
        type_checker=base.TYPE_CHECKER.redefine("integer", is_int),
    )
    return extended(schema)


def check_schema(config: dict[str, Any]) -> None:
    """Fill `config`'s defaults in, in place; raise ConfigError listing the first MAX_ERRORS
    values the schema refuses, each by its key path."""
    errors = sorted(
        _validator(load_schema()).iter_errors(config),
        key=lambda e: (list(e.absolute_path), e.message),
    )
    if errors:
        lines = []
        for error in errors[:MAX_ERRORS]:
            best = jsonschema.exceptions.best_match([error])
            lines.append(f"config key '{key_path(list(best.absolute_path))}': {_message(best)}")
        raise ConfigError("invalid config:\n  " + "\n  ".join(lines))


def _message(error: jsonschema.ValidationError) -> str:
    """The schema's message; for an `anyOf` of required keys, which keys: `missing: one of a,
    b` (not `... is not valid under any of the given schemas`); for what a given key needs
    (`dependentSchemas`), that key: `... (as 'max_turns' is given)`."""
    required = [e for e in error.context if e.validator == "required"]
    if error.validator == "anyOf" and required and len(required) == len(error.context):
        keys = [key for e in required for key in e.validator_value if key not in e.instance]
        return "missing: one of " + ", ".join(keys)
    path = list(error.schema_path)
    if "dependentSchemas" in path:
        given = path[len(path) - path[::-1].index("dependentSchemas")]
        return f"{error.message} (as '{given}' is given)"
    return error.message
