"""GGUF -> Hugging Face safetensors, run by the conversion venv's Python (not the pipeline's).

Standalone on purpose: it imports nothing of `workflow_scripts`, so it runs in a venv that pins
its own torch and transformers. transformers dequantizes the GGUF while loading; the GGUF
quantization marker it leaves on the model is cleared, or `save_pretrained` would write a
config that claims a quantization the safetensors do not have. The chat template travels with
the tokenizer (vLLM's /v1/chat/completions needs it); when transformers did not carry it over,
it is taken from the GGUF's `tokenizer.chat_template` itself. Special tokens are set to the
GGUF's own ids, and a byte-level BPE vocabulary is rebuilt as the GGUF describes it: both
engines must see the same prompt as the same tokens and stop on the same one.

Usage: python convert_gguf_to_hf.py GGUF OUT_DIR DTYPE; prints one JSON line about what it wrote.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DTYPES = ("bfloat16", "float16", "float32")


# GGUF key -> the tokenizer attribute it sets.
SPECIAL_TOKENS = {
    "tokenizer.ggml.bos_token_id": "bos_token",
    "tokenizer.ggml.eos_token_id": "eos_token",
    "tokenizer.ggml.unknown_token_id": "unk_token",
    "tokenizer.ggml.padding_token_id": "pad_token",
}


def gguf_metadata(gguf_path: Path) -> dict:
    """The GGUF's own chat template, special token ids and tokenizer kind (model, pre)."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf_path)).fields

    def text(key: str) -> str | None:
        field = fields.get(key)
        return bytes(field.parts[field.data[0]]).decode("utf-8") if field else None

    return {
        "chat_template": text("tokenizer.chat_template"),
        "model": text("tokenizer.ggml.model"),
        "pre": text("tokenizer.ggml.pre"),
        "special_ids": {
            key: int(fields[key].parts[fields[key].data[0]][0])
            for key in SPECIAL_TOKENS
            if key in fields
        },
    }


def _byte_level_pre_tokenizers():
    """llama.cpp's pre-tokenizer (`tokenizer.ggml.pre`, src/llama-vocab.cpp) of a byte-level BPE
    GGUF -> the Hugging Face pre-tokenizer that splits text the same way."""
    from tokenizers import pre_tokenizers as pre

    byte_level = pre.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    return {
        "default": byte_level,
        "gpt-2": byte_level,
        # `\p{N}` first: every digit a token of its own (SmolLM's tokenizer)
        "smollm": pre.Sequence([pre.Digits(individual_digits=True), byte_level]),
    }


def repair_byte_level_bpe(tokenizer, meta: dict) -> dict:
    """transformers builds a llama-architecture GGUF's byte-level BPE ("gpt2") tokenizer as a
    Llama one: byte fallback on, a SentencePiece decoder, GPT-2's split where the GGUF names
    another (SmolLM splits digits one by one). The pinned tree's converter then writes it back
    as a SentencePiece ("llama") vocabulary. Rebuild it as what the GGUF says it is. Returns
    what was done."""
    if meta["model"] != "gpt2":
        return {}
    from tokenizers import decoders

    backend = tokenizer.backend_tokenizer
    done: dict = {}
    if getattr(backend.model, "byte_fallback", False):
        backend.model.byte_fallback = False
        done["byte_fallback"] = False
    backend.decoder = decoders.ByteLevel()
    tokenizer.clean_up_tokenization_spaces = False  # would strip spaces before punctuation
    splits = _byte_level_pre_tokenizers()
    if meta["pre"] in splits:
        backend.pre_tokenizer = splits[meta["pre"]]
        done["pre_tokenizer"] = meta["pre"]
    else:
        done["pre_tokenizer"] = f"'{meta['pre']}' not mapped: kept transformers' ByteLevel"
    return done


def fix_special_tokens(tokenizer, ids: dict[str, int]) -> dict[str, list[str | None]]:
    """Set bos/eos/unk/pad to the GGUF's own ids where transformers' converter did not (5.17
    gives a BPE tokenizer its bos as eos: SmolLM2 would stop at <|im_start|>, and a GGUF
    converted back would carry that eos). Returns what changed, old and new."""
    changed: dict[str, list[str | None]] = {}
    for key, attribute in SPECIAL_TOKENS.items():
        if key not in ids:
            continue
        wanted = tokenizer.convert_ids_to_tokens(ids[key])
        current = getattr(tokenizer, attribute)
        if current != wanted:
            setattr(tokenizer, attribute, wanted)
            changed[attribute] = [current, wanted]
    return changed


def convert(gguf_path: Path, out_dir: Path, dtype_name: str) -> dict:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()  # a bar per tensor would fill the log

    dtype = getattr(torch, dtype_name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=dtype
    )
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out_dir), safe_serialization=True)

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    meta = gguf_metadata(gguf_path)
    template_from = "transformers"
    if not tokenizer.chat_template:
        tokenizer.chat_template = meta["chat_template"]
        template_from = "gguf" if meta["chat_template"] else None
    special_tokens_fixed = fix_special_tokens(tokenizer, meta["special_ids"])
    tokenizer_repaired = repair_byte_level_bpe(tokenizer, meta)
    tokenizer.save_pretrained(str(out_dir))
    for path in out_dir.iterdir():
        path.chmod(0o644)  # safetensors writes 0600; an engine in a container runs as another user
    return {
        "architecture": model.config.model_type,
        "dtype": dtype_name,
        "parameters": sum(p.numel() for p in model.parameters()),
        "chat_template": template_from,
        "special_tokens_fixed": special_tokens_fixed,
        "tokenizer": {"gguf_model": meta["model"], "gguf_pre": meta["pre"], **tokenizer_repaired},
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[2] not in DTYPES:
        print(f"usage: convert_gguf_to_hf.py GGUF OUT_DIR {{{'|'.join(DTYPES)}}}", file=sys.stderr)
        return 2
    summary = convert(Path(argv[0]).resolve(), Path(argv[1]), argv[2])
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
