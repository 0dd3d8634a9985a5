"""`chlo.ragged_dot`: a dot_general whose lhs is cut into groups along one
"ragged" dimension, the sizes of the groups given at run time.

ChloOps.td ("ragged_dot") defines three modes, told apart by what kind of
dimension the lhs ragged dimension is:

1. a free (non-contracting) dimension m: lhs [b, m, k], rhs [g, b, k, n],
   result [b, m, n]. The rows of group j (the next group_sizes[j] rows of
   m) are multiplied by rhs group j; rows after the last group are 0.
2. a contracting dimension k: lhs [b, m, k], rhs [b, k, n], result
   [g, b, m, n]. Result j contracts only over group j's slice of k.
3. a batch dimension: an ordinary dot_general (groups change nothing).

Both ragged modes become one ordinary dot_general on a "masked" lhs with a
new leading group axis, where copy j keeps only group j's slice of the
ragged dimension and is zero elsewhere (as XLA's and JAX's expansions do).
`group_sizes` has shape [g], or [b..., g] when groups differ per batch
index (its leading dimensions follow the lhs batching dimensions).
The arithmetic is `stablehlo.dot_general`'s (see `dot.py`).
"""
from __future__ import annotations

import re

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.ops.dot import dot_general_arrays

_FIELDS = ("lhs_batching_dimensions", "rhs_batching_dimensions",
           "lhs_contracting_dimensions", "rhs_contracting_dimensions",
           "lhs_ragged_dimensions", "rhs_group_dimensions")
_FIELD = re.compile(r"(\w+)\s*=\s*\[([^\]]*)\]")


def parse_dimension_numbers(text: str) -> dict[str, tuple[int, ...]]:
    """`#chlo.ragged_dot<lhs_batching_dimensions = [0], ...>` -> dict (MLIR
    leaves out the fields that are empty)."""
    numbers = {name: tuple(int(v) for v in values.split(",") if v.strip())
               for name, values in _FIELD.findall(text)}
    unknown = set(numbers) - set(_FIELDS)
    if unknown or not text.startswith("#chlo.ragged_dot<"):
        raise ValueError(f"unexpected attribute {text}")
    return {name: numbers.get(name, ()) for name in _FIELDS}


def _validate_ragged_dot(op) -> None:
    try:
        numbers = parse_dimension_numbers(str(op.attrs["ragged_dot_dimension_numbers"]))
    except ValueError as error:
        raise op.error(f"cannot read ragged_dot_dimension_numbers: {error}") from None
    if len(numbers["lhs_ragged_dimensions"]) != 1:
        raise op.error("ragged_dot needs exactly one lhs ragged dimension")
    for t in op.operand_types:
        if t.quant is not None:
            raise op.error("quantized ragged_dot is not supported", cls=Unimplemented)
    op.cache["numbers"] = numbers


def _group_mask(group_sizes: np.ndarray, ragged_size: int) -> np.ndarray:
    """mask[..., j, i]: is index i of the ragged dimension in group j?"""
    sizes = group_sizes.astype(np.int64)
    ends = np.cumsum(sizes, axis=-1)
    starts = ends - sizes
    index = np.arange(ragged_size)
    return (starts[..., None] <= index) & (index < ends[..., None])


def _masked_lhs(lhs: np.ndarray, group_sizes: np.ndarray, ragged: int,
                lhs_batch: tuple[int, ...]) -> np.ndarray:
    """lhs copied once per group along a new axis 0, zero outside the group."""
    mask = _group_mask(group_sizes, lhs.shape[ragged])  # [batch..., g, ragged]
    batch_rank = group_sizes.ndim - 1
    mask = np.moveaxis(mask, batch_rank, 0)              # [g, batch..., ragged]
    # Where each mask axis after the first goes among lhs[None]'s axes.
    positions = [1 + d for d in lhs_batch[:batch_rank]] + [1 + ragged]
    order = np.argsort(positions)
    mask = mask.transpose([0] + [1 + int(k) for k in order])
    shape = [mask.shape[0]] + [1] * lhs.ndim
    for axis, position in enumerate(sorted(positions), start=1):
        shape[position] = mask.shape[axis]
    mask = mask.reshape(shape)
    return np.where(mask, lhs[None], np.zeros((), lhs.dtype))


@register("chlo.ragged_dot", validate=_validate_ragged_dot)
def ragged_dot(op, lhs, rhs, group_sizes):
    """ChloOps.td "ragged_dot" (modes described in the module docstring).
    precision_config is ignored, as for stablehlo.dot_general."""
    n = op.cache["numbers"]
    lhs_batch, rhs_batch = n["lhs_batching_dimensions"], n["rhs_batching_dimensions"]
    lhs_contract, rhs_contract = n["lhs_contracting_dimensions"], n["rhs_contracting_dimensions"]
    ragged = n["lhs_ragged_dimensions"][0]
    result_dtype = op.result_type.dtype
    shifted = lambda dims: tuple(d + 1 for d in dims)  # noqa: E731
    if ragged in lhs_batch:  # mode 3
        return dot_general_arrays(lhs, rhs, lhs_batch, rhs_batch, lhs_contract, rhs_contract,
                                  result_dtype)
    masked = _masked_lhs(lhs, group_sizes, ragged, lhs_batch)
    if ragged not in lhs_contract:  # mode 1: contract the group axis with rhs's
        group = n["rhs_group_dimensions"][0]
        return dot_general_arrays(masked, rhs, shifted(lhs_batch), rhs_batch,
                                  (0,) + shifted(lhs_contract), (group,) + rhs_contract,
                                  result_dtype)
    # mode 2: the group axis is a free lhs axis, first after the batch axes
    result = dot_general_arrays(masked, rhs, shifted(lhs_batch), rhs_batch,
                                shifted(lhs_contract), rhs_contract, result_dtype)
    return np.moveaxis(result, len(lhs_batch), 0)
