"""Edge values for every element type compiled code carries (interpreter/native/
loop_expressions.py): 0, +-1, the type's min and max, shift amounts past the
width, +-0, +-inf, NaN, subnormals, halves, values beyond an integer's range.
Compiled loops (test_optimiser_loop_ops.py) and fused runs
(test_optimiser_fusion_integers.py) are both checked on them."""
from __future__ import annotations

import itertools

import numpy as np

SIGNED = ["i8", "i16", "i32", "i64"]
UNSIGNED = ["ui8", "ui16", "ui32", "ui64"]
INTEGERS = SIGNED + UNSIGNED
FLOATS = ["f32", "f64"]
NUMPY = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "ui8": np.uint8,
         "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64, "f32": np.float32,
         "f64": np.float64, "i1": np.bool_}


def edge_values(element: str) -> np.ndarray:
    dtype = np.dtype(NUMPY[element])
    if element == "i1":
        return np.array([False, True])
    if dtype.kind == "f":
        values = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, np.inf, -np.inf, np.nan,
                  1e-45, -3e-39, 3.4e38, 1e10, -1e10, 2.0 ** 31, -2.0 ** 31 - 1, 2.0 ** 63, -2.0 ** 64,
                  255.5, -128.7, 123.456, 7.0, -7.0]
        with np.errstate(over="ignore"):
            return np.array(values, dtype=dtype)
    info = np.iinfo(dtype)
    values = [0, 1, -1, 2, -2, 3, 7, -7, 31, 32, 33, 63, 64, 65, 200, info.min, info.max,
              info.min + 1, info.max - 1]
    return np.array([v % 2 ** info.bits for v in values], np.uint64).astype(dtype)


def pairs(element: str) -> tuple[np.ndarray, np.ndarray]:
    values = edge_values(element)
    a, b = zip(*itertools.product(values, values))
    return np.array(a, values.dtype), np.array(b, values.dtype)
