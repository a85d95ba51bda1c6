"""YAML with a bound on what its aliases expand to.

PyYAML builds an aliased node once and shares it, so a few hundred bytes of nested aliases (a
"billion laughs") load in no time and then explode wherever the config is copied, validated or
printed: 9 aliases of 9 aliases, 7 deep, are 4.8 million strings. The document is composed first
(shared, cheap), its expanded size counted over the node graph, and only a document within the
bound is constructed.
"""

from __future__ import annotations

from typing import Any

import yaml

# 100 000 values: 270 times the largest shipped config (configs/gb10-gemma4.yaml, 362).
MAX_NODES = 100_000

# libyaml's loader where PyYAML has it, as the schema is read.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class TooLarge(ValueError):
    """A document whose aliases expand past the bound, or refer to themselves."""


def expanded_size(root: yaml.Node, bound: int = MAX_NODES) -> int:
    """Nodes the document has once every alias is replaced by a copy of what it names (capped
    at bound + 1). Each distinct node is sized once, children first."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = min(bound + 1, 1 + sum(sizes[id(c)] for c in children))
            continue
        if key in open_nodes:
            raise TooLarge("a YAML alias refers to itself (a recursive alias expands forever)")
        open_nodes.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise TooLarge("a YAML alias refers to itself (a recursive alias expands forever)")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load(text: str, bound: int = MAX_NODES) -> Any:
    """`yaml.safe_load(text)`, refusing a document that expands past `bound` nodes."""
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = expanded_size(node, bound)
        if size > bound:
            raise TooLarge(
                f"YAML aliases expand to more than {bound} values (an alias bomb?); write the "
                "values out, or alias less"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()
