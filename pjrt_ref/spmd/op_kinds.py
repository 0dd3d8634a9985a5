"""What both ways of running a partitioned program know about ops: which
compute element by element, which hand their operand on, how a reshape pairs
dimensions, how GSPMD spells a sharding group. Splits carry through the
first two unchanged.
"""
from __future__ import annotations

import re

# GSPMD's spelling of a sharding group's member: `@Sharding` with "{shard_as N}" or "{shard_like N}".
GROUP_SHARDING = re.compile(r"\bshard_(?:as|like) (\d+)")
# Custom calls whose result is their operand, placed or laid out elsewhere
# (interpreter/ops/placement.py): the operand's sharding carries over.
SAME_VALUE_CALLS = frozenset(("LayoutConstraint", "annotate_device_placement", "MoveToHost", "MoveToDevice"))
ELEMENTWISE = frozenset("stablehlo." + name for name in (
    "abs add and atan2 cbrt ceil clamp compare complex convert cosine count_leading_zeros "
    "divide exponential exponential_minus_one floor imag is_finite log log_plus_one logistic "
    "maximum minimum multiply negate not or popcnt power real reduce_precision remainder "
    "round_nearest_afz round_nearest_even rsqrt select shift_left shift_right_arithmetic "
    "shift_right_logical sign sine sqrt subtract tan tanh xor").split())


def reshape_groups(before: tuple, after: tuple) -> list[tuple[list[int], list[int]]]:
    """The smallest runs of dimensions (of `before`, of `after`) with equal
    element counts, in order, size-1 dimensions left out: a reshape of
    (4, 4, 2) to (4, 8) has groups ([0], [0]) and ([1, 2], [1])."""
    groups: list = []
    if any(size <= 0 for size in (*before, *after)):    # empty or dynamic: nothing to split
        return groups
    i = j = 0
    while True:
        while i < len(before) and before[i] == 1:
            i += 1
        while j < len(after) and after[j] == 1:
            j += 1
        if i == len(before) or j == len(after):
            return groups
        dims_before, dims_after = [i], [j]
        count_before, count_after = before[i], after[j]
        i, j = i + 1, j + 1
        while count_before != count_after:
            if count_before < count_after:
                count_before *= before[i]
                dims_before.append(i)
                i += 1
            else:
                count_after *= after[j]
                dims_after.append(j)
                j += 1
        groups.append((dims_before, dims_after))
