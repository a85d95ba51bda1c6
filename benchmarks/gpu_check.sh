#!/usr/bin/env bash
# GPU check (issue #11), run on a GPU machine from the repo root, e.g. through the device tool:
#   run(command="bash benchmarks/gpu_check.sh build", carry=[".carry"], timeout_s=480)
#   run(command="bash benchmarks/gpu_check.sh run", carry=[".carry"], timeout_s=480)
# `build` provisions the engines (CUDA build) and the synthetic weights; `run` runs the whole
# matrix (reusing them when the machine is still the same). One `run` alone also does it all.
# Needs .carry/ from benchmarks/gpu_check_prepare.sh (the machine has no package registry).
# Builds llama-server with CUDA from the carried sdist, installs the carried wheels, runs
# configs/h200-check.yaml with snakemake, and packs results/ into $OUT/gpu-check.tar.gz.
# Build outputs go to .gpu-cache/ (not carried, git-ignored), so a rerun on a still-warm
# machine skips the build.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
log="$OUT/gpu-check.log"
exec > >(tee -a "$log") 2>&1
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }
start=$(date +%s)

export LLMBENCH_CACHE="$PWD/.gpu-cache"
version=0.3.36
mkdir -p "$LLMBENCH_CACHE/downloads/llama-cpp-python-$version"
cp -n .carry/sdist/llama_cpp_python-$version.tar.gz "$LLMBENCH_CACHE/downloads/llama-cpp-python-$version/"

stamp "installing carried wheels"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .carry/whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PATH="/tmp/site/bin:$PATH" PYTHONUNBUFFERED=1
python3 -c "import snakemake, gguf, jsonschema, pynvml; print('python deps ok')" || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.csv"

config=configs/h200-check.yaml
targets=()
if [ "${1:-run}" = build ]; then
  targets=(results/engines/llamacpp-cuda.json results/engines/llamacpp-cuda-seeds-split.json
           results/weights/llama-1b-shape__f16.json)
fi
stamp "snakemake --cores 1 --configfile $config ${targets[*]}"
python3 -m snakemake "${targets[@]}" --cores 1 --configfile "$config"
status=$?
for f in logs/engines/*.log logs/weights/*.log; do
  [ -f "$f" ] && { echo "== tail of $f"; tail -n 15 "$f"; }
done
cat results/engines/*.json 2>/dev/null | head -40
stamp "snakemake exited $status after $(( $(date +%s) - start )) s"

python3 - <<'PY'
import json, pathlib
for path in sorted(pathlib.Path("results/cells").glob("*/metrics.json")):
    m = json.loads(path.read_text())
    guard = m.get("context_guard") or {}
    print(m["cell"], m["status"], m.get("reason") or "",
          "done", m.get("completed"), "err", m.get("errors"), "decode", m.get("decode_tok_s"),
          "gpu_gib", (m.get("mem") or {}).get("gpu_used_peak_gib"),
          "skipped", len(guard.get("skipped") or []), "ready_s", m.get("ready_s"))
PY
tar -czf "$OUT/gpu-check.tar.gz" results logs \
  --exclude='*/requests.jsonl' 2>/dev/null
tar -czf "$OUT/gpu-check-requests.tar.gz" results/cells/*/requests.jsonl 2>/dev/null
cp "$LLMBENCH_CACHE"/engines/*/build.json "$OUT/engine-build.json" 2>/dev/null
stamp "total $(( $(date +%s) - start )) s"
exit $status
