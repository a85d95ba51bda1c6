#!/usr/bin/env bash
# Prepare what the GPU check carries to a machine with no package registry (run here, once):
#   .carry/sdist/llama_cpp_python-<v>.tar.gz  the pinned sdist trimmed to what a CPU+CUDA
#                                             llama-server build needs (same layout, ~8 MB)
#   .carry/whl/                               wheels for Python 3.12 that the device lacks
# .carry/ is git-ignored; the device tool carries it with `carry: [".carry"]`.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
out=.carry
mkdir -p "$out/sdist" "$out/whl"

sdist=$(python3 -c "from workflow_scripts.registry_fetch import fetch_distribution as f; print(f('llama-cpp-python', '$version', sdist=True))")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$sdist" -C "$work" --wildcards --exclude='*/.git/*' '*/vendor/llama.cpp/*'
tree=$(echo "$work"/*/vendor/llama.cpp)
rm -rf "$tree"/{models,docs,tests,examples,media,pocs,benches,gguf-py,.devops} "$tree"/tools/ui/src
for backend in "$tree"/ggml/src/ggml-*/; do
  case "$(basename "$backend")" in ggml-cpu|ggml-cuda|ggml-blas) ;; *) rm -rf "$backend" ;; esac
done
mkdir -p "$tree/tests" "$tree/examples"   # configure still looks for the folders
(cd "$work" && tar -czf - "$(basename "$(dirname "$(dirname "$tree")")")") \
  > "$out/sdist/$(basename "$sdist")"
ls -la "$out/sdist"

# Wheels for the device's Python 3.12: snakemake and what the project needs beyond its image.
pip wheel -q --no-deps connection_pool==0.0.3 -w "$out/whl"
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any --find-links "$out/whl" -d "$out/whl" \
  snakemake==9.27.1 gguf==0.19.0 jsonschema
# Already in the device image (KINDS.md): keep one version of each.
(cd "$out/whl" && rm -f numpy-* packaging-* requests-* attrs-* jinja2-* [Mm]arkup[Ss]afe-* \
  psutil-* tabulate-* certifi-* charset_normalizer-* idna-* urllib3-* typing_extensions-* \
  [Pp]y[Yy][Aa][Mm][Ll]-* tqdm-* wrapt-*)
du -sh "$out"

# The tokenizer and chat template of SmolLM2 (a GGUF with its tokenizer.* keys and no tensors,
# ~2 MB instead of 98 MB): the synthetic model shapes take their tokenizer from it.
python3 - "$out/smollm2-tokenizer.gguf" <<'PY'
import sys

from gguf import GGUFWriter

from workflow_scripts.config.matrix import load_cells
from workflow_scripts.weights.synthetic import Tokenizer
from workflow_scripts.weights.fetch import fetch_weights

smollm2 = next(c for c in load_cells("config.yaml") if c.model == "smollm2-135m")
source = fetch_weights(smollm2.weights, "/tmp/smollm2-manifest.json")["primary"]
writer = GGUFWriter(sys.argv[1], arch="llama")
writer.add_description(f"tokenizer only, from {source}")
for key, value, vtype, sub_type in Tokenizer.from_gguf(source).fields:
    writer.add_key_value(key, value, vtype, sub_type=sub_type)
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_ti_data_to_file()
writer.close()
PY

# The head of ShareGPT V3 (first 6 MiB, cut mid-conversation like the registry file itself):
# its complete conversations give the same first prompts, in the same order, as the full file.
python3 - "$out/sharegpt-head.json" <<'PY'
import sys

from workflow_scripts.loadgen.datasets import sharegpt_file

with open(sharegpt_file(), "rb") as src, open(sys.argv[1], "wb") as dst:
    dst.write(src.read(6 * 2**20))
PY
du -sh "$out"/*
