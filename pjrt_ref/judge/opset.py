"""The ops `pjrt-ref fuzz` writes, each with the element types the StableHLO spec allows it.

One `OpSpec` per op: its operand count, the element-type classes its
"Constraints" section admits, what its result's element type is, and the
attributes to choose from. The generator (programs.py) builds only what
these allow, so every program it writes is valid by construction; the
judge (ruling.py) recomputes each op from its spec section.

Element types are MLIR's names (`i4`, `ui8`, `bf16`, `complex<f32>`), in
classes: bool (i1), signed and unsigned integers, floats, complex.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

ELEMENT_CLASSES: dict[str, tuple[str, ...]] = {
    "bool": ("i1",),
    "signed": ("i4", "i8", "i16", "i32", "i64"),
    "unsigned": ("ui4", "ui8", "ui16", "ui32", "ui64"),
    "float": ("f8E4M3FN", "f8E5M2", "bf16", "f16", "f32", "f64"),
    "complex": ("complex<f32>", "complex<f64>"),
}
INTEGER = ("signed", "unsigned")
NUMBERS = INTEGER + ("float", "complex")
ALL = ("bool",) + NUMBERS


PART_TYPE = {"complex<f32>": "f32", "complex<f64>": "f64"}
COMPLEX_OF = {part: whole for whole, part in PART_TYPE.items()}


def bit_width(element_type: str) -> int:
    """Bits per element (what bitcast_convert keeps)."""
    if element_type == "i1":
        return 1
    digits = "".join(c for c in element_type.split("E")[0] if c.isdigit())
    return int(digits) * (2 if element_type.startswith("complex") else 1)


def element_class(element_type: str) -> str:
    """The class ("signed", "float", ...) of an element type name."""
    for name, members in ELEMENT_CLASSES.items():
        if element_type in members:
            return name
    raise KeyError(f"not an element type the fuzzer writes: {element_type}")


@dataclass(frozen=True)
class OpSpec:
    """What the generator needs to know to write one op validly."""

    name: str                       # "add" for stablehlo.add
    arity: int
    classes: tuple[str, ...]        # element classes of the operands (spec "Constraints")
    result: str = "same"            # "same", "i1" (a predicate), "real" (complex's part type)
    # What the spec asks of the result: "exact" (integer arithmetic, IEEE-754's
    # correctly rounded operations, comparisons) or "approximate" (the
    # transcendental functions, whose accuracy it leaves to the implementation).
    accuracy: str = "exact"
    only: tuple[str, ...] = ()      # the element types allowed, where a class says too much

    @property
    def mlir_name(self) -> str:
        return f"stablehlo.{self.name}"


def _unary(names: str, classes, accuracy: str = "exact", result: str = "same") -> list[OpSpec]:
    return [OpSpec(name, 1, tuple(classes), result, accuracy) for name in names.split()]


def _binary(names: str, classes, accuracy: str = "exact") -> list[OpSpec]:
    return [OpSpec(name, 2, tuple(classes), "same", accuracy) for name in names.split()]


OPS: dict[str, OpSpec] = {spec.name: spec for spec in [
    *_unary("negate", NUMBERS),
    *_unary("abs", ("signed", "float")),
    *_unary("sign", ("signed", "float", "complex")),
    *_unary("not", ("bool",) + INTEGER),
    *_unary("popcnt count_leading_zeros", INTEGER),
    *_unary("floor ceil round_nearest_afz round_nearest_even", ("float",)),
    *_unary("sqrt", ("float",)),
    *_unary("is_finite", ("float",), result="i1"),
    *_unary("exponential exponential_minus_one log log_plus_one logistic rsqrt cbrt tanh sine cosine tan",
            ("float",), accuracy="approximate"),
    *_binary("add multiply maximum minimum", ("bool",) + NUMBERS),
    *_binary("subtract", NUMBERS),
    *_binary("divide", NUMBERS),
    *_binary("remainder", INTEGER + ("float",)),
    *_binary("and or xor", ("bool",) + INTEGER),
    *_binary("shift_left shift_right_logical shift_right_arithmetic", INTEGER),
    *_binary("power atan2", ("float",), accuracy="approximate"),
    OpSpec("compare", 2, ALL[:-1], result="i1"),
    OpSpec("select", 3, ALL[:-1]),         # (i1 predicate, on_true, on_false)
    OpSpec("clamp", 3, INTEGER + ("float",)),
    OpSpec("convert", 1, ALL[:-1]),        # to any element type (complex stays out: its -> real is TBD)
    OpSpec("bitcast_convert", 1, ALL[:-1]),   # to a type of the same width
    *_unary("real imag", ("complex",), result="real"),
    OpSpec("complex", 2, ("float",), result="complex", only=("f32", "f64")),
    # Structural ops (structural.py): element moves are exact; a float sum's order is not.
    *_unary("transpose reverse slice reshape broadcast_in_dim", ALL),
    OpSpec("pad", 2, ALL),
    OpSpec("reduce", 1, ALL[:-1], accuracy="approximate"),
    OpSpec("sort", 1, ALL[:-2]),
    *_unary("dynamic_slice case while", ALL),
    OpSpec("dynamic_update_slice", 2, ALL),
    OpSpec("gather", 2, ALL),
    OpSpec("scatter", 3, ALL[:-1], accuracy="approximate"),
    OpSpec("reduce_window", 1, ALL[:-1], accuracy="approximate"),
    OpSpec("select_and_scatter", 2, INTEGER + ("float",), accuracy="approximate"),
    OpSpec("batch_norm_inference", 5, ("float",), accuracy="approximate"),
    OpSpec("reduce_precision", 1, ("float",), only=("f16", "bf16", "f32", "f64")),
    OpSpec("iota", 1, INTEGER + ("float",)),     # its operand only lends the shape
    OpSpec("map", 2, ALL[:-1]),
    OpSpec("convolution", 2, ("signed", "unsigned", "float"), accuracy="approximate"),
    OpSpec("concatenate", 2, ALL),
    OpSpec("dot_general", 2, ("signed", "unsigned", "float"), accuracy="approximate"),
]}

COMPARISON_DIRECTIONS = ("EQ", "NE", "GE", "GT", "LE", "LT")


def comparison_type(element_type: str) -> str:
    """compare's `compare_type` for operands of `element_type` (spec: compare, (C3))."""
    kind = element_class(element_type)
    return {"float": "FLOAT", "signed": "SIGNED"}.get(kind, "UNSIGNED")


def selected(pattern: str | None) -> dict[str, OpSpec]:
    """The ops whose names match `pattern` (a regular expression, searched; None: all)."""
    if not pattern:
        return dict(OPS)
    chosen = {name: spec for name, spec in OPS.items() if re.search(pattern, name)}
    if not chosen:
        raise ValueError(f"--ops {pattern!r} matches none of the ops the fuzzer writes: {', '.join(OPS)}")
    return chosen
