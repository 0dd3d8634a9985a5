"""Fused runs of integer and bit ops (interpreter/optimiser/fusion.py) give the
plain interpreter's bits on edge values, for every element type, and a
PRNG round fuses whole: the index arithmetic between its ops moves before
the run instead of cutting it. Before, integers never fused, and JAX's
threefry on 10^7 elements ran its loop op by op (issue 32)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tests.support.edge_values import FLOATS, INTEGERS, NUMPY, SIGNED, edge_values, pairs
from tests.support.jit_support import assert_same_values, load_with
from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402

from pjrt_ref.interpreter.ops import bitwise  # noqa: E402

BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum",
          "and", "or", "xor", "shift_left", "shift_right_logical", "shift_right_arithmetic"]
UNARY = ["negate", "not", "popcnt", "count_leading_zeros"]
SIGNED_UNARY = ["abs", "sign"]   # spec: `si` types only
DIRECTIONS = ["EQ", "NE", "LT", "LE", "GT", "GE"]


def _program(lines: list, arguments: list, results: list) -> str:
    """`func.func @main` with `lines` in its body, returning `results` ((name, type) pairs)."""
    signature = ", ".join(f"%{name}: {ttype}" for name, ttype in arguments)
    names = ", ".join(name for name, _ in results)
    types = ", ".join(ttype for _, ttype in results)
    body = "\n".join(f"  {line}" for line in lines)
    return f"func.func @main({signature}) -> ({types}) {{\n{body}\n  return {names} : {types}\n}}"


def _fused_steps(program) -> list:
    return [s for s in program.function.body.steps if s.op.name == "pjrt_ref.fused"]


def _check_one_compiled_run(text: str, inputs: tuple, monkeypatch) -> None:
    """The whole body fuses into one compiled loop with the plain interpreter's bits."""
    plain = load_with(text, monkeypatch, optimize=False)
    fused = load_with(text, monkeypatch, optimize=True)
    steps = [s.op.name for s in fused.function.body.steps]
    (run,) = _fused_steps(fused)
    assert steps == ["pjrt_ref.fused"] and not run.op.attrs.get("chunked"), steps
    for ours, theirs in zip(fused(*inputs), plain(*inputs)):
        assert_same_values(ours, theirs)


@pytest.mark.parametrize("element", INTEGERS)
def test_every_integer_op_of_a_type_in_one_run(element, monkeypatch):
    """All binary, unary and compare ops of one integer type, one fused loop:
    wrap-around, x / 0, INT_MIN / -1, shift amounts past the width."""
    a, b = pairs(element)
    t, p = f"tensor<{a.size}x{element}>", f"tensor<{a.size}xi1>"
    kind = "UNSIGNED" if element.startswith("ui") else "SIGNED"
    unary = UNARY + (SIGNED_UNARY if element in SIGNED else [])
    lines, results = [], []
    for index, op in enumerate(BINARY):
        lines.append(f'%b{index} = "stablehlo.{op}"(%a, %b) : ({t}, {t}) -> {t}')
        results.append((f"%b{index}", t))
    for index, op in enumerate(unary):
        lines.append(f'%u{index} = "stablehlo.{op}"(%b) : ({t}) -> {t}')
        results.append((f"%u{index}", t))
    for index, direction in enumerate(DIRECTIONS):
        lines.append(f'%c{index} = "stablehlo.compare"(%a, %b) {{comparison_direction = '
                     f'#stablehlo<comparison_direction {direction}>, compare_type = '
                     f'#stablehlo<comparison_type {kind}>}} : ({t}, {t}) -> {p}')
        results.append((f"%c{index}", p))
    lines.append(f'%k = "stablehlo.clamp"(%b, %a, %b0) : ({t}, {t}, {t}) -> {t}')
    lines.append(f'%s = "stablehlo.select"(%c2, %k, %b1) : ({p}, {t}, {t}) -> {t}')
    results.append(("%s", t))
    _check_one_compiled_run(_program(lines, [("a", t), ("b", t)], results), (a, b), monkeypatch)


@pytest.mark.parametrize("source", INTEGERS + FLOATS + ["i1"])
def test_converts_and_bitcasts_from_a_type_in_one_run(source, monkeypatch):
    """convert to every type (integers wrap; floats to integers truncate and
    saturate, NaN to 0) and bitcast to every type of the same width."""
    values = edge_values(source)
    t = f"tensor<{values.size}x{source}>"
    lines, results = [], []
    for index, result in enumerate(INTEGERS + FLOATS + ["i1"]):
        r = f"tensor<{values.size}x{result}>"
        lines.append(f'%v{index} = "stablehlo.convert"(%a) : ({t}) -> {r}')
        results.append((f"%v{index}", r))
        same_width = np.dtype(NUMPY[source]).itemsize == np.dtype(NUMPY[result]).itemsize
        if source != result and "i1" not in (source, result) and same_width:
            lines.append(f'%w{index} = "stablehlo.bitcast_convert"(%a) : ({t}) -> {r}')
            results.append((f"%w{index}", r))
    _check_one_compiled_run(_program(lines, [("a", t)], results), (values,), monkeypatch)


def _rotation_round(size: int) -> str:
    """One threefry rotation as JAX writes it: the amount sliced from a table
    and 32 - amount computed on 0-d values between the elementwise ops."""
    t = f"tensor<{size}xui32>"
    return _program([
        f"%0 = stablehlo.add %x, %y : {t}",
        "%1 = stablehlo.slice %rot [1:2] : (tensor<4xui32>) -> tensor<1xui32>",
        "%2 = stablehlo.reshape %1 : (tensor<1xui32>) -> tensor<ui32>",
        f"%3 = stablehlo.broadcast_in_dim %2, dims = [] : (tensor<ui32>) -> {t}",
        f"%4 = stablehlo.shift_left %y, %3 : {t}",
        "%c = stablehlo.constant dense<32> : tensor<ui32>",
        "%5 = stablehlo.subtract %c, %2 : tensor<ui32>",
        f"%6 = stablehlo.broadcast_in_dim %5, dims = [] : (tensor<ui32>) -> {t}",
        f"%7 = stablehlo.shift_right_logical %y, %6 : {t}",
        f"%8 = stablehlo.or %4, %7 : {t}",
        f"%9 = stablehlo.xor %0, %8 : {t}",
    ], [("x", t), ("y", t), ("rot", "tensor<4xui32>")], [("%9", t)])


@pytest.mark.parametrize("amount", [13, 0, 32, 40])
def test_a_rotation_fuses_whole_around_its_index_arithmetic(amount, monkeypatch):
    rng = np.random.default_rng(amount)
    x, y = (rng.integers(0, 2 ** 32, 1000, dtype=np.uint32) for _ in range(2))
    rot = np.array([17, amount, 26, 6], np.uint32)
    text = _rotation_round(x.size)
    plain = load_with(text, monkeypatch, optimize=False)
    fused = load_with(text, monkeypatch, optimize=True)
    names = [s.op.name for s in fused.function.body.steps]
    assert names[-1] == "pjrt_ref.fused" and names.count("pjrt_ref.fused") == 1, names
    assert not any("shift" in name for name in names), names
    assert_same_values(fused(x, y, rot)[0], plain(x, y, rot)[0])
    # The spec's shifts: an amount >= 32 (32 - 40 wraps to 2^32 - 8) shifts everything out.
    left = y << np.uint32(amount) if amount < 32 else 0 * y
    right_amount = (32 - amount) % 2 ** 32
    right = y >> np.uint32(right_amount) if right_amount < 32 else 0 * y
    np.testing.assert_array_equal(fused(x, y, rot)[0], (x + y) ^ (left | right))


def test_a_big_index_computation_is_not_moved(monkeypatch):
    """Only small steps move before a run: a large one may start a run of its own."""
    size = 1000
    t = f"tensor<{size}xui32>"
    text = _program([
        f"%0 = stablehlo.add %x, %y : {t}",
        f"%1 = stablehlo.slice %z [0:{size}] : (tensor<{2 * size}xui32>) -> {t}",
        f"%2 = stablehlo.xor %0, %1 : {t}",
        f"%3 = stablehlo.add %2, %x : {t}",
    ], [("x", t), ("y", t), ("z", f"tensor<{2 * size}xui32>")], [("%3", t)])
    fused = load_with(text, monkeypatch, optimize=True)
    names = [s.op.name for s in fused.function.body.steps]
    assert names == ["stablehlo.add", "stablehlo.slice", "pjrt_ref.fused"], names


def test_threefry_bits_fuse_and_match_xla(monkeypatch):
    """jax.random.bits on pjrt-ref's optimised interpreter: the bits JAX's cpu
    backend draws (integer arithmetic: exact on every backend)."""
    key = jax.random.key(7)
    n = 3000
    text = lower_to_text(lambda k: jax.random.bits(k, (n,)), key)
    program = load_with(text, monkeypatch, optimize=True)
    assert _fused_steps(program)
    ours = program(np.asarray(jax.random.key_data(key)))[0]
    np.testing.assert_array_equal(ours, np.asarray(jax.random.bits(key, (n,))))


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("op", ["shift_left", "shift_right_logical", "shift_right_arithmetic"])
@pytest.mark.parametrize("element", INTEGERS)
def test_direct_shift_kernels_give_the_generic_kernels_bits(element, op, saturate, monkeypatch):
    """bitwise.specialize_shift on both answers of its numpy probe: numpy's
    own shifts where they give 0 past the width, the generic kernel where not."""
    monkeypatch.setattr(bitwise, "numpy_shifts_saturate", lambda: saturate)
    a, b = pairs(element)
    t = f"tensor<{a.size}x{element}>"
    text = _program([f'%v = "stablehlo.{op}"(%a, %b) : ({t}, {t}) -> {t}'],
                    [("a", t), ("b", t)], [("%v", t)])
    plain = load_with(text, monkeypatch, optimize=False)
    direct = load_with(text, monkeypatch, optimize=True, jit=False)
    (step,) = direct.function.body.steps
    assert step.kernel.__name__.endswith("_direct") == (saturate or op == "shift_right_arithmetic")
    assert_same_values(direct(a, b)[0], plain(a, b)[0])


def _iota_program(shape: tuple, element: str) -> str:
    """x + iota along each dimension of `shape`, one output per dimension."""
    t = f"tensor<{'x'.join(map(str, shape))}x{element}>"
    lines, results = [], []
    for dimension in range(len(shape)):
        lines.append(f"%i{dimension} = stablehlo.iota dim = {dimension} : {t}")
        lines.append(f"%r{dimension} = stablehlo.add %x, %i{dimension} : {t}")
        results.append((f"%r{dimension}", t))
    return _program(lines, [("x", t)], results)


def _iota_oracle(x: np.ndarray) -> list:
    """numpy's indices, converted as numpy converts (uint8 keeps the low bits)."""
    return [x + index.astype(np.uint64).astype(x.dtype) for index in np.indices(x.shape)]


@pytest.mark.parametrize("shape, element", [((3, 5, 7), "ui32"), ((2, 300), "ui8"),
                                            ((3, 100_003), "i64"), ((300_007,), "ui64")])
def test_iota_fuses_along_each_dimension(shape, element, monkeypatch):
    """A fused iota is the element's index along its dimension, computed from
    its index in the run (pieces on threads start where they start)."""
    dtype = np.dtype(NUMPY[element])
    x = (np.arange(math.prod(shape)) * 7919 % 1000).astype(dtype).reshape(shape)
    text = _iota_program(shape, element)
    fused = load_with(text, monkeypatch, optimize=True)
    assert [s.op.name for s in fused.function.body.steps] == ["pjrt_ref.fused"]
    plain = load_with(text, monkeypatch, optimize=False)
    for ours, theirs, expected in zip(fused(x), plain(x), _iota_oracle(x)):
        assert_same_values(ours, theirs)
        np.testing.assert_array_equal(ours, expected)


def test_a_fused_iotas_numpy_form_gives_the_same_elements(tmp_path, monkeypatch):
    """Before its kernel is built (background.py) the run goes chunk by chunk
    on numpy, an iota's chunk from the chunk's element indices."""
    from pjrt_ref.interpreter.optimiser import background

    monkeypatch.setenv("PJRT_REF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PJRT_REF_JIT_BACKGROUND", "1")
    monkeypatch.setenv("PJRT_REF_JIT_HOT_SECONDS", "3600")
    shape = (5, 40_009)
    x = (np.arange(math.prod(shape)) % 251).astype(np.uint32).reshape(shape)
    text = _iota_program(shape, "ui32")
    program = load_with(text, monkeypatch, optimize=True)
    (step,) = program.function.body.steps
    assert isinstance(step.kernel, background.Switchable) and step.kernel.built() is None
    for ours, expected in zip(program(x), _iota_oracle(x)):
        np.testing.assert_array_equal(ours, expected)


def test_a_hash_and_the_log_of_its_uniform_are_two_runs(monkeypatch):
    """A run goes either through one compiled loop or chunk by chunk through
    numpy's kernels; integer ops (compiled only) and an f32 log (numpy's
    float64 log only) split into one run of each kind, with the same bits."""
    n = 5000
    t, f = f"tensor<{n}xui32>", f"tensor<{n}xf32>"
    text = _program([
        f"%0 = stablehlo.xor %x, %y : {t}",
        "%c9 = stablehlo.constant dense<9> : tensor<ui32>",
        f"%nine = stablehlo.broadcast_in_dim %c9, dims = [] : (tensor<ui32>) -> {t}",
        f"%1 = stablehlo.shift_right_logical %0, %nine : {t}",
        "%cone = stablehlo.constant dense<1065353216> : tensor<ui32>",
        f"%one = stablehlo.broadcast_in_dim %cone, dims = [] : (tensor<ui32>) -> {t}",
        f"%2 = stablehlo.or %1, %one : {t}",
        f"%3 = stablehlo.bitcast_convert %2 : ({t}) -> {f}",
        f"%4 = stablehlo.log %3 : {f}",
        f"%5 = stablehlo.negate %4 : {f}",
    ], [("x", t), ("y", t)], [("%5", f)])
    rng = np.random.default_rng(5)
    x, y = (rng.integers(0, 2 ** 32, n, dtype=np.uint32) for _ in range(2))
    fused = load_with(text, monkeypatch, optimize=True)
    runs = _fused_steps(fused)
    assert len(runs) == 2 and [bool(r.op.attrs.get("chunked")) for r in runs] == [False, True]
    plain = load_with(text, monkeypatch, optimize=False)
    assert_same_values(fused(x, y)[0], plain(x, y)[0])
