# SGLang as the published GB10 cells of AxionML/Gemma-4-12B-NVFP4 ran it, built once.
#
# The published runs (cards _configs/gemma-4-12b-it-axionml-sglang-nvfp4{,-mtp}.md, wrapper
# scripts/bench-sglang-gemma4-modelopt-serving.sh of gauravmm/autobench) started the dated nightly
# below and, inside the container at every start, replaced its SGLang checkout with the branch
# `gemma4-modelopt-ptq` of bzhng-development/sglang and installed transformers at a pinned commit.
# No published image holds that overlay, and a branch is not a pin. This file applies the same
# overlay at build time to the same base (pinned by the digest the cards record), with the branch
# resolved to a commit you pass in, so both SGLang cells run the same code and the image says which:
#
#   docker build -f envs/sglang-gemma4-modelopt.Dockerfile \
#     --build-arg SGLANG_COMMIT=$(git ls-remote https://github.com/bzhng-development/sglang.git \
#       refs/heads/gemma4-modelopt-ptq | cut -f1) \
#     -t llmbench/sglang-gemma4-modelopt:nightly-dev-cu13-20260623-ba9d5aed envs
#
# The engine step records the image id and this label. The branch head you resolve today may not
# be the one of 2026-06-23 (the cards do not record that commit).
ARG BASE=lmsysorg/sglang:nightly-dev-cu13-20260623-ba9d5aed@sha256:ca580c17cf5f9d2e268f4153d977e3cd46528feb2c62a4de8683a05d08da3cf2
FROM ${BASE}

ARG SGLANG_REPO=https://github.com/bzhng-development/sglang.git
ARG SGLANG_BRANCH=gemma4-modelopt-ptq
ARG SGLANG_COMMIT
ARG TRANSFORMERS_REF=1423d22f7a3b62e8c70ad67b58ec25cd9b675897

# The image installs SGLang in editable mode from /sgl-workspace/sglang, so a new checkout there is
# the SGLang that runs (what the published overlay relied on too).
RUN test -n "${SGLANG_COMMIT}" || { echo "pass --build-arg SGLANG_COMMIT=<sha of ${SGLANG_BRANCH}>" >&2; exit 1; } \
    && rm -rf /sgl-workspace/sglang \
    && git clone --branch "${SGLANG_BRANCH}" "${SGLANG_REPO}" /sgl-workspace/sglang \
    && git -C /sgl-workspace/sglang checkout "${SGLANG_COMMIT}" \
    && pip install "git+https://github.com/huggingface/transformers.git@${TRANSFORMERS_REF}"

LABEL org.opencontainers.image.version="sglang ${SGLANG_BRANCH}@${SGLANG_COMMIT}; transformers@${TRANSFORMERS_REF}; base nightly-dev-cu13-20260623-ba9d5aed"
