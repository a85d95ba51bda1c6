"""Random synthetic prompts (the `random` kind): words drawn from a fixed vocabulary, seeded."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from typing import Any

from ..prompts import Dataset, Prompt
from .registry import register


def load_random(num_prompts: int, input_len: int, seed: int | None = 0) -> Dataset:
    """Prompts of about `input_len` words drawn from a fixed vocabulary (token counts vary)."""
    rng = random.Random(0 if seed is None else seed)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "river",
        "stone",
        "cloud",
        "paper",
        "engine",
        "signal",
        "matrix",
        "orbit",
        "lantern",
        "copper",
        "meadow",
        "violet",
        "harbor",
        "quartz",
        "tundra",
        "ember",
    ]
    prompts = [
        Prompt(i, " ".join(rng.choice(words) for _ in range(input_len))) for i in range(num_prompts)
    ]
    # No file to hash: the digest is of the prompts themselves, so equal digests mean equal text.
    digest = hashlib.sha256(json.dumps([p.text for p in prompts]).encode()).hexdigest()
    return Dataset(prompts, digest, f"random(input_len={input_len}, seed={seed})")


@register("random")
def random_source(spec: Mapping[str, Any], num_prompts: int) -> Dataset:
    return load_random(num_prompts, int(spec.get("input_len", 128)), spec.get("shuffle_seed"))
