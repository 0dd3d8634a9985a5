"""Dynamic cases: shape-polymorphic programs without checks.

Upstream's `stablehlo/testdata/dynamic` holds JAX exports with symbolic
shapes: `@main` takes leading `tensor<i64>` dimension-size arguments (one
per dimension variable), then tensors with `?` dimensions, and contains no
check ops. Upstream only tests that such a file survives a serialization
round trip. Here a case whose function takes arguments and whose chunk has
no checks passes when all three of these hold:

1. Round trip (upstream's RUN lines): the module serialized to a portable
   artifact at the current StableHLO version and deserialized again prints
   exactly as the original does (both printed by jaxlib's bindings).
2. pjrt-ref runs the function on synthesized arguments (`synthesize`):
   every dimension-size argument and every `?` dimension is bound to
   `DIMENSION_SIZE`, values are random with a fixed seed and small (integers
   in 0..2, so index-like arguments stay in bounds; floats multiples of 1/4
   in [-2, 2], so that sums are exact whatever their order).
3. The results agree (`compare`) with StableHLO's C++ reference interpreter
   (`stablehlo.eval_module`) on the same program made static
   (`oracle.static_module`): @main's argument types pinned to the
   synthesized shapes, dimension-size arguments replaced by constants,
   shapes refined by XLA's `refine_polymorphic_shapes` (what JAX runs before
   compiling an export) and `@shape_assertion` calls dropped. The reference
   interpreter runs in a forked child process (`oracle.py`), as it aborts
   on ops it does not know.

A round trip that does not reproduce the module, or a result that differs,
is a failure; an exception from pjrt-ref is an error; a program the oracle
cannot run (it crashed, or shape refinement rejected the module) is
unsupported, with the oracle's reason.
"""
from __future__ import annotations

import re

import numpy as np

from pjrt_ref.interpreter.loader import make_context
from pjrt_ref.interpreter.ops.checks import equal_elements, ulp_difference
from pjrt_ref.interpreter.types import TensorType, is_bool, is_complex, is_float, is_integer

DIMENSION_SIZE = 3
SEED = 0
MAX_ULP_DIFFERENCE = 3  # as `@check.expect_close` in JAX's test files
RELATIVE_TOLERANCE = {2: 1e-2, 4: 1e-5, 8: 1e-12}  # float width -> tolerance

# Any check op or check custom call makes a case self-checking.
_CHECK = re.compile(r"\bcheck\.[a-z_]+|@check\.")


class RoundTripMismatch(Exception):
    """The module did not survive serialization to a portable artifact."""


def has_checks(text: str) -> bool:
    return bool(_CHECK.search(text))


# --- 1. the serialization round trip ---

def round_trip(text: str) -> str:
    """Check upstream's RUN lines: serialize `text` at the current version,
    deserialize, and compare the printed modules. Returns the version used;
    raises RoundTripMismatch naming the first differing line."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    version = stablehlo.get_current_version()
    try:
        artifact = stablehlo.serialize_portable_artifact_str(text, version)
        restored = stablehlo.deserialize_portable_artifact_str(artifact)
    except Exception as error:  # noqa: BLE001 - upstream's RUN line would fail
        raise RoundTripMismatch(f"serialization round trip at version {version} failed: "
                                f"{error}") from None
    with make_context() as context, ir.Location.unknown():
        context.enable_multithreading(False)  # see worker._Contexts
        original = str(ir.Module.parse(text))
        after = str(ir.Module.parse(restored))
    if original != after:
        raise RoundTripMismatch(f"after a round trip through a portable artifact (version "
                                f"{version}) the module prints differently: "
                                f"{_first_difference(original, after)}")
    return version


def _first_difference(before: str, after: str) -> str:
    lines_before, lines_after = before.splitlines(), after.splitlines()
    for number, (a, b) in enumerate(zip(lines_before, lines_after), start=1):
        if a != b:
            return f"line {number}: {a.strip()!r} became {b.strip()!r}"
    return f"{len(lines_before)} lines became {len(lines_after)}"


# --- 2. arguments ---

def dimension_argument_count(input_types) -> int:
    """How many leading arguments are dimension sizes: JAX passes one
    integer scalar per dimension variable before the array arguments."""
    if not any(isinstance(t, TensorType) and None in t.shape for t in input_types):
        return 0
    count = 0
    for ttype in input_types:
        if not (isinstance(ttype, TensorType) and ttype.shape == () and is_integer(ttype.dtype)):
            break
        count += 1
    return count


def synthesize(input_types, seed: int = SEED) -> list[np.ndarray]:
    """Arguments for a function of `input_types` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    dimensions = dimension_argument_count(input_types)
    arguments = []
    for index, ttype in enumerate(input_types):
        if not isinstance(ttype, TensorType) or ttype.quant is not None:
            raise NotImplementedError(f"cannot synthesize an argument of type {ttype}")
        if index < dimensions:
            arguments.append(np.array(DIMENSION_SIZE, ttype.dtype))
            continue
        shape = tuple(DIMENSION_SIZE if d is None else d for d in ttype.shape)
        arguments.append(_random_array(rng, shape, ttype.dtype))
    return arguments


def _random_array(rng, shape: tuple, dtype: np.dtype) -> np.ndarray:
    if is_bool(dtype):
        return rng.integers(0, 2, shape).astype(bool)
    if is_integer(dtype):
        return rng.integers(0, 3, shape).astype(dtype)
    if is_complex(dtype):
        return (_quarters(rng, shape) + 1j * _quarters(rng, shape)).astype(dtype)
    if is_float(dtype):
        return _quarters(rng, shape).astype(dtype)
    raise NotImplementedError(f"cannot synthesize {dtype} values")


def _quarters(rng, shape: tuple) -> np.ndarray:
    """Multiples of 1/4 in [-2, 2]: exact in every float type used here, and
    sums of their products are exact too, so that results of dot products,
    convolutions and reductions do not depend on the order of summation."""
    return rng.integers(-8, 9, shape) / 4.0


# --- 3. comparison ---

class ResultMismatch(Exception):
    """pjrt-ref's results differ from the reference interpreter's."""


def compare(ours: list, theirs: list) -> None:
    """Raise ResultMismatch at the first result that differs: integers and
    booleans exactly, floats within MAX_ULP_DIFFERENCE ULP or the relative
    tolerance of their width (NaN matches NaN)."""
    if len(ours) != len(theirs):
        raise ResultMismatch(f"pjrt-ref returned {len(ours)} result(s), the reference "
                             f"interpreter {len(theirs)}")
    for number, (mine, reference) in enumerate(zip(ours, theirs)):
        mine, reference = np.asarray(mine), np.asarray(reference)
        if mine.shape != reference.shape or mine.dtype != reference.dtype:
            raise ResultMismatch(
                f"result {number}: pjrt-ref gives {mine.dtype}{list(mine.shape)}, the "
                f"reference interpreter {reference.dtype}{list(reference.shape)}")
        ok = _agree(mine, reference)
        if not ok.all():
            bad = np.argwhere(~ok)
            index = tuple(int(i) for i in bad[0])
            raise ResultMismatch(
                f"result {number}: {len(bad)} of {ok.size} element(s) differ; first at index "
                f"{list(index)}: pjrt-ref {_text(mine[index])} vs reference interpreter "
                f"{_text(reference[index])}")


def _agree(mine: np.ndarray, reference: np.ndarray) -> np.ndarray:
    ok = equal_elements(mine, reference)
    if is_float(mine.dtype) or is_complex(mine.dtype):
        ok |= ulp_difference(mine, reference) <= np.uint64(MAX_ULP_DIFFERENCE)
        complex_ = is_complex(mine.dtype)
        part_width = mine.dtype.itemsize // (2 if complex_ else 1)
        tolerance = RELATIVE_TOLERANCE.get(part_width, 0.0)
        wide = np.complex128 if complex_ else np.float64
        a, b = mine.astype(wide), reference.astype(wide)
        with np.errstate(invalid="ignore", over="ignore"):
            ok |= np.isfinite(a) & np.isfinite(b) & (np.abs(a - b) <= tolerance * np.abs(b))
    return ok


def _text(value) -> str:
    dtype = np.asarray(value).dtype
    if is_complex(dtype):
        return repr(complex(value))
    if is_float(dtype):
        return repr(float(value))
    return str(np.asarray(value).item())


def describe(arguments: list, dimensions: int, version: str, results: int) -> str:
    """The message of a passing dynamic case: what was checked."""
    dims = (f"{dimensions} dimension argument(s) and every '?' = {DIMENSION_SIZE}"
            if dimensions else f"every '?' = {DIMENSION_SIZE}")
    return (f"round trip at version {version} reproduces the module; ran with {dims} "
            f"({len(arguments)} argument(s), seed {SEED}); {results} result(s) match the "
            f"StableHLO reference interpreter on the shape-refined module (integers exactly, "
            f"floats within {MAX_ULP_DIFFERENCE} ULP or a relative {RELATIVE_TOLERANCE[4]:g} "
            f"for f32)")
