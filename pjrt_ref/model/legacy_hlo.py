"""Legacy HLO forms that XLA's importer carries into StableHLO unchanged, rewritten.

HLO's dynamic-slice and dynamic-update-slice once took their start indices
as one rank-1 tensor (`dynamic-slice(s64[5] p, s64[1] i)`); today they take
one scalar per dimension. XLA CPU still accepts the old form, and
PyTorch/XLA still emits it (`torch.randperm`'s Fisher-Yates loop, scatter's
mean reduction). jaxlib's HLO -> StableHLO importer copies it as it is into
`stablehlo.dynamic_slice` / `dynamic_update_slice`, which the StableHLO spec
(C2-C3 of dynamic_slice, C4 of dynamic_update_slice: `start_indices` are
0-dimensional) and its verifier refuse.

`rewrite_legacy_forms` takes the importer's output in MLIR's generic form
(one op per line, before any verification) and replaces each rank-1 start
index tensor `%i : tensor<NxT>` by N scalars, `stablehlo.slice` then
`stablehlo.reshape` of element k, which is what the old form meant.
"""
from __future__ import annotations

import re

# `%r = "stablehlo.OP"(OPERANDS) ATTRIBUTES : (TYPES) -> RESULT LOCATION`, the generic form.
_OP_LINE = re.compile(
    r'^(?P<indent>\s*)(?P<result>%[\w.$-]+) = "stablehlo\.(?P<op>dynamic_slice|dynamic_update_slice)"'
    r'\((?P<operands>[^()]*)\)(?P<attributes>.*?) : \((?P<types>.*)\) -> (?P<result_type>tensor<[^>]*>)'
    r'(?P<location> loc\(.*\))?$')
_TENSOR = re.compile(r"^tensor<(?P<dims>(?:\d+x)*)(?P<element>[a-z]+\d*)>$")
# Operand index of the first start index.
_FIRST_INDEX = {"dynamic_slice": 1, "dynamic_update_slice": 2}


def rewrite_legacy_forms(generic_text: str) -> str:
    """`generic_text` with every rank-1 start-index tensor split into scalars."""
    if "stablehlo.dynamic_" not in generic_text:
        return generic_text
    lines = []
    for number, line in enumerate(generic_text.splitlines()):
        lines.extend(_rewritten(line, number) or [line])
    return "\n".join(lines) + "\n"


def _rank(tensor_type: str) -> int | None:
    match = _TENSOR.match(tensor_type.strip())
    return None if match is None else match.group("dims").count("x")


def _split_types(types: str) -> list[str]:
    """A generic op's operand types, split at the commas outside `<...>`."""
    parts, depth, start = [], 0, 0
    for position, character in enumerate(types):
        depth += {"<": 1, ">": -1}.get(character, 0)
        if character == "," and depth == 0:
            parts.append(types[start:position].strip())
            start = position + 1
    parts.append(types[start:].strip())
    return parts


def _rewritten(line: str, number: int) -> list[str] | None:
    """The lines replacing `line` if it is a legacy dynamic slice or update, else None."""
    match = _OP_LINE.match(line)
    if match is None:
        return None
    operands = [name.strip() for name in match.group("operands").split(",")]
    types = _split_types(match.group("types"))
    first = _FIRST_INDEX[match.group("op")]
    rank = _rank(types[0])
    if len(operands) != first + 1 or len(types) != first + 1 or not rank:
        return None
    index, index_type = operands[first], _TENSOR.match(types[first])
    if index_type is None or index_type.group("dims") != f"{rank}x":
        return None
    element = index_type.group("element")
    location = match.group("location") or ""
    indent = match.group("indent")
    lines, scalars = [], []
    for k in range(rank):
        piece, scalar = f"%pjrt_ref_legacy{number}_{k}_slice", f"%pjrt_ref_legacy{number}_{k}"
        lines.append(f'{indent}{piece} = "stablehlo.slice"({index}) <{{limit_indices = array<i64: {k + 1}>, '
                     f'start_indices = array<i64: {k}>, strides = array<i64: 1>}}> : '
                     f'({types[first]}) -> tensor<1x{element}>{location}')
        lines.append(f'{indent}{scalar} = "stablehlo.reshape"({piece}) : (tensor<1x{element}>) -> '
                     f'tensor<{element}>{location}')
        scalars.append(scalar)
    new_operands = ", ".join(operands[:first] + scalars)
    new_types = ", ".join(types[:first] + [f"tensor<{element}>"] * rank)
    lines.append(f'{indent}{match.group("result")} = "stablehlo.{match.group("op")}"({new_operands})'
                 f'{match.group("attributes")} : ({new_types}) -> {match.group("result_type")}{location}')
    return lines
