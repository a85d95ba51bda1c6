"""Synthetic weights: a llama-architecture GGUF of a given shape with random weights.

It lets a machine with no route to the hub benchmark a model *shape*: the tokenizer and chat
template are copied from a real GGUF, so prompts tokenize as they would for the real model and the
server's chat endpoint works; the throughput is real, the text is noise (serve with `ignore_eos`).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Storage types the `gguf` package can write from numpy; K-quants it can only read.
DTYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1")
# K-quants written as random blocks: random quants and sub-block scales, with each block's f16
# super-scales (at these byte offsets, from ggml-common.h) set to small finite values so the
# weights stay in range. Enough for a smoke test of the kernels; never a model of any quality.
K_QUANT_SCALE_OFFSETS = {
    "q2_k": (80, 82),  # scales[16], qs[64], d, dmin
    "q3_k": (108,),  # hmask[32], qs[64], scales[12], d
    "q4_k": (0, 2),  # d, dmin, scales[12], qs[128]
    "q5_k": (0, 2),  # d, dmin, scales[12], qh[32], qs[128]
    "q6_k": (208,),  # ql[128], qh[64], scales[16], d
}
_K_QUANT_SCALE = np.float16(2.0**-9)
# Random weights are f16 bit patterns with this exponent field: |w| in [2**-7, 2**-6), random sign
# and mantissa. Activations stay in range at any width, and generation is a few bit operations.
_F16_EXPONENT_BITS = 0x2000
_F16_SIGN_MANTISSA = 0x83FF
_CHUNK_ELEMENTS = 1 << 24
# llama_ftype values (llama.h): what `general.file_type` says the bulk of the tensors are.
_FILE_TYPES = {
    "f32": 0,
    "f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q8_0": 7,
    "q5_0": 8,
    "q5_1": 9,
    "bf16": 32,
    "q2_k": 10,
    "q3_k": 12,
    "q4_k": 15,
    "q5_k": 17,
    "q6_k": 18,
}


class SyntheticError(ValueError):
    """A shape or tokenizer source that cannot make a loadable model."""


@dataclass(frozen=True)
class LlamaShape:
    """The dimensions that set a llama-architecture model's compute and memory."""

    hidden_size: int
    layers: int
    ffn_size: int
    heads: int
    kv_heads: int
    context_length: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    tied_embeddings: bool = True

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LlamaShape:
        shape = cls(**data)
        shape.check()
        return shape

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.heads

    @property
    def kv_size(self) -> int:
        return self.head_dim * self.kv_heads

    def check(self) -> None:
        if self.hidden_size % self.heads:
            raise SyntheticError(
                f"shape: hidden_size {self.hidden_size} is not a multiple of heads {self.heads}"
            )
        if self.heads % self.kv_heads:
            raise SyntheticError(
                f"shape: heads {self.heads} is not a multiple of kv_heads {self.kv_heads}"
            )

    def tensors(self, vocab_size: int) -> list[tuple[str, tuple[int, ...]]]:
        """(GGUF tensor name, numpy shape as rows x columns) in file order."""
        h, f, kv = self.hidden_size, self.ffn_size, self.kv_size
        out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (vocab_size, h))]
        for i in range(self.layers):
            out += [
                (f"blk.{i}.attn_norm.weight", (h,)),
                (f"blk.{i}.attn_q.weight", (h, h)),
                (f"blk.{i}.attn_k.weight", (kv, h)),
                (f"blk.{i}.attn_v.weight", (kv, h)),
                (f"blk.{i}.attn_output.weight", (h, h)),
                (f"blk.{i}.ffn_norm.weight", (h,)),
                (f"blk.{i}.ffn_gate.weight", (f, h)),
                (f"blk.{i}.ffn_up.weight", (f, h)),
                (f"blk.{i}.ffn_down.weight", (h, f)),
            ]
        out.append(("output_norm.weight", (h,)))
        if not self.tied_embeddings:
            out.append(("output.weight", (vocab_size, h)))
        return out

    def parameter_count(self, vocab_size: int) -> int:
        return sum(int(np.prod(shape)) for _, shape in self.tensors(vocab_size))


@dataclass(frozen=True)
class Tokenizer:
    """The `tokenizer.*` key-values of a real GGUF (vocabulary, merges, chat template)."""

    source: str
    fields: tuple[tuple[str, Any, Any, Any], ...]  # (key, value, type, sub_type)
    vocab_size: int

    @classmethod
    def from_gguf(cls, path: str | Path) -> Tokenizer:
        from gguf import GGUFReader, GGUFValueType

        reader = GGUFReader(path)
        fields = []
        for key, field in reader.fields.items():
            if not key.startswith("tokenizer."):
                continue
            vtype = field.types[0]
            sub_type = field.types[-1] if vtype == GGUFValueType.ARRAY else None
            fields.append((key, field.contents(), vtype, sub_type))
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        if tokens is None:
            raise SyntheticError(f"{path}: no tokenizer.ggml.tokens, cannot take its tokenizer")
        return cls(source=str(path), fields=tuple(fields), vocab_size=len(tokens.data))

    @classmethod
    def byte_level(cls) -> Tokenizer:
        """A tokenizer of our own making, no model file needed: SentencePiece-style with only
        `<unk>`, `<s>`, `</s>` and the 256 byte tokens, so any text encodes byte by byte."""
        from gguf import GGUFValueType

        tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
        # llama.cpp token types: 2 unknown, 3 control, 6 byte.
        types = [2, 3, 3, *([6] * 256)]
        fields = (
            ("tokenizer.ggml.model", "llama", GGUFValueType.STRING, None),
            ("tokenizer.ggml.tokens", tokens, GGUFValueType.ARRAY, GGUFValueType.STRING),
            (
                "tokenizer.ggml.scores",
                [0.0] * len(tokens),
                GGUFValueType.ARRAY,
                GGUFValueType.FLOAT32,
            ),
            ("tokenizer.ggml.token_type", types, GGUFValueType.ARRAY, GGUFValueType.INT32),
            ("tokenizer.ggml.unknown_token_id", 0, GGUFValueType.UINT32, None),
            ("tokenizer.ggml.bos_token_id", 1, GGUFValueType.UINT32, None),
            ("tokenizer.ggml.eos_token_id", 2, GGUFValueType.UINT32, None),
        )
        return cls(source="byte-level (built in)", fields=fields, vocab_size=len(tokens))

    @property
    def has_chat_template(self) -> bool:
        return any(key == "tokenizer.chat_template" for key, *_ in self.fields)


def _random_f16(rng: np.random.Generator, count: int) -> np.ndarray:
    bits = rng.integers(0, 1 << 16, size=count, dtype=np.uint16)
    bits &= _F16_SIGN_MANTISSA
    bits |= _F16_EXPONENT_BITS
    return bits.view(np.float16)


def _tensor_chunks(
    name: str, shape: tuple[int, ...], seed: int, qtype: Any
) -> Iterator[np.ndarray]:
    """A tensor's bytes in row chunks, seeded by (seed, name) so files are reproducible."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    if len(shape) == 1:  # norms: ones, f32 as llama.cpp expects
        yield np.ones(shape, dtype=np.float32)
        return
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    rows, cols = shape
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // cols)
    for start in range(0, rows, rows_per_chunk):
        n_rows = min(rows_per_chunk, rows - start)
        if qtype.name.lower() in K_QUANT_SCALE_OFFSETS:
            yield _random_k_blocks(rng, n_rows * cols, qtype)
            continue
        block = _random_f16(rng, n_rows * cols).reshape(n_rows, cols)
        if qtype == GGMLQuantizationType.F16:
            yield block
        else:
            yield quantize(block.astype(np.float32), qtype)


def _random_k_blocks(rng: np.random.Generator, count: int, qtype: Any) -> np.ndarray:
    """`count` weights of a K-quant as random blocks with small finite super-scales."""
    from gguf import GGML_QUANT_SIZES

    block_size, type_size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(count // block_size, type_size), dtype=np.uint8)
    scale = np.frombuffer(_K_QUANT_SCALE.tobytes(), dtype=np.uint8)
    for offset in K_QUANT_SCALE_OFFSETS[qtype.name.lower()]:
        blocks[:, offset : offset + 2] = scale
    return blocks


def _nbytes(shape: tuple[int, ...], qtype: Any) -> int:
    from gguf import GGML_QUANT_SIZES

    block_size, type_size = GGML_QUANT_SIZES[qtype]
    return int(np.prod(shape)) // block_size * type_size


@dataclass(frozen=True)
class BuildInfo:
    """What a build made, for the manifest."""

    parameters: int
    vocab_size: int
    tensors: int
    dtype: str
    seed: int
    tokenizer_source: str
    chat_template: bool


def build_gguf(
    shape: LlamaShape,
    tokenizer: Tokenizer,
    out_path: str | Path,
    dtype: str = "f16",
    seed: int = 0,
    name: str = "synthetic",
    tensor_dtypes: Mapping[str, str] | None = None,
) -> BuildInfo:
    """Write the model to `out_path`, tensor by tensor (memory stays at one chunk). `dtype` is
    the bulk storage type; `tensor_dtypes` gives single matrices another one (a mixed model)."""
    from gguf import GGMLQuantizationType, GGUFWriter

    tensor_dtypes = dict(tensor_dtypes or {})
    for used in {dtype, *tensor_dtypes.values()}:
        if used not in DTYPES and used not in K_QUANT_SCALE_OFFSETS:
            choices = ", ".join([*DTYPES, *K_QUANT_SCALE_OFFSETS])
            raise SyntheticError(f"dtype '{used}' is not one of {choices}")
        block_size = _quant_block(GGMLQuantizationType[used.upper()])
        for dim_name in ("hidden_size", "ffn_size"):
            if getattr(shape, dim_name) % block_size:
                raise SyntheticError(
                    f"shape: {dim_name} {getattr(shape, dim_name)} must be a multiple of "
                    f"{block_size} for dtype {used}"
                )
    tensors = shape.tensors(tokenizer.vocab_size)

    def tensor_qtype_of(tensor_name: str, tensor_shape: tuple[int, ...]) -> Any:
        if len(tensor_shape) == 1:
            return GGMLQuantizationType.F32
        return GGMLQuantizationType[tensor_dtypes.get(tensor_name, dtype).upper()]

    writer = GGUFWriter(out_path, arch="llama")
    writer.add_name(name)
    writer.add_type("model")
    writer.add_description(f"synthetic: random weights (seed {seed}); text output is noise")
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.hidden_size)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn_size)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    writer.add_vocab_size(tokenizer.vocab_size)
    writer.add_file_type(_FILE_TYPES[dtype])
    for key, value, vtype, sub_type in tokenizer.fields:
        writer.add_key_value(key, value, vtype, sub_type=sub_type)
    for tensor_name, tensor_shape in tensors:
        tensor_qtype = tensor_qtype_of(tensor_name, tensor_shape)
        writer.add_tensor_info(
            tensor_name,
            tensor_shape,
            np.dtype(np.float32),
            _nbytes(tensor_shape, tensor_qtype),
            raw_dtype=tensor_qtype,
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    assert writer.fout is not None
    out = writer.fout[0]
    alignment = writer.data_alignment
    for tensor_name, tensor_shape in tensors:
        tensor_qtype = tensor_qtype_of(tensor_name, tensor_shape)
        out.write(b"\0" * (-out.tell() % alignment))
        written = 0
        for chunk in _tensor_chunks(tensor_name, tensor_shape, seed, tensor_qtype):
            chunk.tofile(out)
            written += chunk.nbytes
        if written != _nbytes(tensor_shape, tensor_qtype):
            raise AssertionError(f"{tensor_name}: wrote {written} bytes")
    out.write(b"\0" * (-out.tell() % alignment))
    out.flush()
    os.fsync(out.fileno())
    writer.close()
    return BuildInfo(
        parameters=shape.parameter_count(tokenizer.vocab_size),
        vocab_size=tokenizer.vocab_size,
        tensors=len(tensors),
        dtype=dtype,
        seed=seed,
        tokenizer_source=tokenizer.source,
        chat_template=tokenizer.has_chat_template,
    )


def _quant_block(qtype: Any) -> int:
    from gguf import GGML_QUANT_SIZES

    return GGML_QUANT_SIZES[qtype][0]


def file_bytes(shape: LlamaShape, vocab_size: int, dtype: str) -> int:
    """About the size of the file `build_gguf` writes (tensor data; metadata is small)."""
    from gguf import GGMLQuantizationType

    qtype = GGMLQuantizationType[dtype.upper()]
    return sum(
        _nbytes(s, GGMLQuantizationType.F32 if len(s) == 1 else qtype)
        for _, s in shape.tensors(vocab_size)
    )
