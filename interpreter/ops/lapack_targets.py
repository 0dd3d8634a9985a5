"""jaxlib's LAPACK custom-call targets: the contract they share, checked when
a program is loaded, and the one batch loop every family runs in.

JAX's CPU lowering rules (jax/_src/lax/linalg.py) emit typed-FFI custom
calls named `lapack_<p><routine>_ffi`, <p> being LAPACK's type prefix (s f32,
d f64, c c64, z c128); jaxlib serves them in jaxlib/cpu/lapack_kernels.cc.
pjrt-ref serves the same names with scipy.linalg.lapack (lapack_*.py next to
this module), so both JAX's `pjrt_ref` lowering (pjrt_ref/frameworks/jax/
linalg.py) and programs exported for CPU run here. What the targets share:

* Options are FFI attributes. JAX puts them in the `mhlo.backend_config`
  dictionary (with api_version 1 and `backend_config = ""`); StableHLO's own
  typed-FFI form is api_version 4 with a dictionary `backend_config`. Both
  are read. LAPACK's CHARACTER arguments (UPLO, JOBZ, ...) travel as ui8
  character codes: `uplo = 76 : ui8` is 'L'.
* Operands are batches of problems. The operands with the most dimensions
  are matrices [..., rows, cols] and fix the batch; operands with one
  dimension less are one vector per matrix (taus, pivots, diagonals). Results
  follow the same rule, and LAPACK's INFO is an int32 per matrix (no
  dimension of its own).
* Matrices are column-major: jaxlib's kernels read and write memory as
  [r-2, r-1, r-3, ..., 0] for them and the default (descending) layout for
  everything else, whatever `operand_layouts`/`result_layouts` say. XLA lays
  the operands out as the call says; a call that says another layout
  (ffi_test's batch partitioning does) makes the kernel read the same bytes
  as other numbers, and XLA reads its results back the same way. pjrt-ref
  does what XLA does (`reread`), so such a call gives XLA's numbers.
* A call that breaks the contract (wrong operand count, types, options)
  fails when it runs, with the reason, as on XLA CPU, whose handlers check
  their arguments when called: a program may carry a call it never makes
  (ffi_test's `test_effects_hlo` compiles one).
* Some results start as a copy of an operand that LAPACK then overwrites in
  place (jaxlib's CopyIfDiffBuffer; JAX aliases the two with
  `output_operand_aliases`). A problem with an empty matrix does not call
  LAPACK: those results keep their copy, the rest are zero, INFO is 0.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from pjrt_ref.interpreter.registry import register_custom_call
from pjrt_ref.interpreter.types import TensorType

# LAPACK's type prefix -> element type of the matrices.
PREFIX_DTYPES = {"s": np.dtype(np.float32), "d": np.dtype(np.float64),
                 "c": np.dtype(np.complex64), "z": np.dtype(np.complex128)}
LAPACK_DTYPES = tuple(PREFIX_DTYPES.values())
# LAPACK INTEGER as jaxlib passes it (LapackIntDtype): INFO, pivots.
INT = np.dtype(np.int32)

MATRIX, VECTOR, INT_VECTOR = "matrix", "vector", "int32 vector"   # operand kinds
_BLAS_ROUTINES = frozenset({"trsm"})


def real_dtype(dtype: np.dtype) -> np.dtype:
    """f32 for f32 and c64, f64 for f64 and c128 (singular values, eigenvalues of
    Hermitian matrices, the diagonals of a tridiagonal form)."""
    return np.finfo(dtype).dtype


def complex_dtype(dtype: np.dtype) -> np.dtype:
    """c64 for f32 and c64, c128 for f64 and c128 (eigenvectors of `geev`)."""
    return np.result_type(dtype, np.complex64)


@functools.lru_cache(maxsize=None)
def _scipy_routine(name: str, dtype: np.dtype) -> Callable:
    # scipy.linalg is slow to import: only programs that use LAPACK pay it.
    from scipy.linalg import get_blas_funcs, get_lapack_funcs

    lookup = get_blas_funcs if name in _BLAS_ROUTINES else get_lapack_funcs
    (routine,) = lookup((name,), dtype=dtype)
    return routine


class Lapack:
    """scipy's LAPACK (and BLAS) routines for one element type. `routine` is
    the target's own routine (scipy.linalg.lapack.cungqr for
    lapack_cungqr_ffi), `lwork_query` its workspace query (`cungqr_lwork`),
    and any other routine is an attribute: `Lapack(f32, ...).geqrf` is sgeqrf."""

    def __init__(self, dtype: np.dtype, name: str | None):
        self.dtype = np.dtype(dtype)
        self.is_complex = self.dtype.kind == "c"
        self.name = name

    @property
    def routine(self) -> Callable:
        return getattr(self, self.name)

    @property
    def lwork_query(self) -> Callable:
        return getattr(self, f"{self.name}_lwork")

    def __getattr__(self, name: str) -> Callable:
        return _scipy_routine(name, self.dtype)


def optimal_lwork(work) -> int:
    """LWORK from a workspace query (LWORK = -1 or scipy's `*_lwork`), which
    LAPACK answers in WORK(1), a floating-point number: rounded up, since in
    single precision a large size may have been rounded down."""
    value = np.real(np.ravel(work)[0])
    return max(1, int(np.ceil(np.nextafter(value, np.inf))))


# ------------------------------------------------------------------ options
def character(*allowed: str) -> Callable:
    """Decoder of a LAPACK CHARACTER option, sent as its ui8 code."""

    def decode(value):
        if type(value) is int and 0 <= value < 256 and chr(value) in allowed:
            return chr(value)
        codes = ", ".join(f"{ord(c)} ('{c}')" for c in allowed)
        raise ValueError(f"expected one of the character codes {codes}, got {value!r}")

    return decode


def boolean(value) -> bool:
    """Decoder of a boolean option."""
    if type(value) is bool:
        return value
    raise ValueError(f"expected a boolean, got {value!r}")


def int32(value) -> int:
    """Decoder of an int32 option."""
    if type(value) is int and -2**31 <= value < 2**31:
        return value
    raise ValueError(f"expected a 32-bit integer, got {value!r}")


def backend_options(op) -> dict:
    """The FFI attributes of a typed-FFI custom call (see the module docstring)."""
    version = op.attrs.get("api_version", 1)
    config = op.attrs.get("backend_config", "")
    if version == 4 and isinstance(config, dict):
        return config
    if version == 1 and config == "":
        options = op.attrs.get("mhlo.backend_config", {})
        if isinstance(options, dict):
            return options
    raise ValueError(
        "jaxlib's LAPACK targets are typed-FFI calls: their options are a dictionary, in "
        "`mhlo.backend_config` (api_version 1, backend_config = \"\") or in `backend_config` "
        f"(api_version 4); got api_version {version} and backend_config {config!r}")


# ------------------------------------------------------------------ layouts
def column_major_layout(rank: int) -> tuple[int, ...]:
    """Minor-to-major order of a column-major batch of matrices."""
    return (rank - 2, rank - 1, *range(rank - 3, -1, -1))


def expected_layout(rank: int, matrix_rank: int) -> tuple[int, ...]:
    if rank == matrix_rank and rank >= 2:
        return column_major_layout(rank)
    return tuple(range(rank - 1, -1, -1))


def call_layouts(op, matrix_rank: int) -> tuple[list, list]:
    """(operand layouts, result layouts) of the call, each paired with the one the
    kernel reads or writes: [(given, kernel's)] per operand and per result."""
    pairs = []
    for name, types in (("operand_layouts", op.operand_types), ("result_layouts", op.result_types)):
        layouts = op.attrs.get(name)
        if layouts is None:
            raise ValueError(f"{name} is missing: jaxlib's LAPACK targets read column-major "
                             "matrices, and the call must say how its arrays are laid out")
        found = []
        for index, (layout, ttype) in enumerate(zip(layouts, types)):
            rank = len(ttype.shape)
            given = tuple(int(d) for d in layout)
            if sorted(given) != list(range(rank)):
                raise ValueError(f"{name}[{index}] is {list(given)}, not a layout of rank {rank}")
            found.append((given, expected_layout(rank, matrix_rank)))
        pairs.append(found)
    return pairs[0], pairs[1]


def reread(array: np.ndarray, stored_in: tuple[int, ...], read_as: tuple[int, ...]) -> np.ndarray:
    """The array whose bytes in layout `read_as` (minor_to_major) are those of
    `array` laid out in `stored_in`: what a kernel that reads memory its own
    way sees (or what XLA reads back from memory a kernel wrote)."""
    if stored_in == read_as or array.ndim < 2:
        return array
    memory = np.ascontiguousarray(np.transpose(array, stored_in[::-1])).reshape(-1)
    physical = memory.reshape([array.shape[d] for d in read_as[::-1]])
    return np.transpose(physical, np.argsort(read_as[::-1]))


# ------------------------------------------------------------------ targets
@dataclass(frozen=True)
class Target:
    """One custom-call target: its contract and the LAPACK work per problem.

    `results(*operand_shapes, dtype=..., **options)` returns the (shape,
    dtype) of every result (shape None: any shape, the values are not
    computed), raising ValueError for operand shapes the routine cannot take.
    `solve(lapack, *problem, **options)` gets one problem's operands (the
    batch index applied) and returns one value per result (None: leave it).
    """

    name: str
    routine: str | None             # the LAPACK routine without its prefix ("getrf")
    dtype: np.dtype | None          # None: any LAPACK type, read from the operands
    operands: tuple[str, ...]       # MATRIX, VECTOR or INT_VECTOR per operand
    options: dict[str, Callable]    # option name -> decoder
    results: Callable
    solve: Callable
    copies: dict[int, int] = field(default_factory=dict)   # result -> operand it starts as

    def validate(self, op) -> None:
        """Load-time reading of the op against the contract (hook of the registry):
        what breaks it is kept and raised when the call runs (module docstring)."""
        try:
            options = self._decode_options(backend_options(op))
            dtype = self._check_operands(op)
            expected = self.results(*(t.shape for t in op.operand_types), dtype=dtype, **options)
            self._check_results(op, expected)
            layouts = call_layouts(op, self._matrix_rank(op))
        except ValueError as error:
            op.cache["lapack_broken"] = f"@{self.name}: {error}"
            return
        op.cache["lapack"] = (dtype, options, layouts)

    def _decode_options(self, given: dict) -> dict:
        unknown = sorted(set(given) - set(self.options))
        missing = sorted(set(self.options) - set(given))
        if unknown or missing:
            raise ValueError(f"backend_config has {'unknown ' + str(unknown) if unknown else ''}"
                             f"{' and ' if unknown and missing else ''}"
                             f"{'no ' + str(missing) if missing else ''}; "
                             f"this target takes {sorted(self.options) or 'no options'}")
        decoded = {}
        for name, decode in self.options.items():
            try:
                decoded[name] = decode(given[name])
            except ValueError as error:
                raise ValueError(f"backend_config option {name!r}: {error}") from None
        return decoded

    def _check_operands(self, op) -> np.dtype:
        types = op.operand_types
        if len(types) != len(self.operands):
            raise ValueError(f"takes {len(self.operands)} operand(s) ({', '.join(self.operands)}), "
                             f"got {len(types)}")
        for index, ttype in enumerate(types):
            if not isinstance(ttype, TensorType) or not ttype.is_static or ttype.quant is not None:
                raise ValueError(f"operand #{index} must be a tensor of static shape, got {ttype}")
        dtype = self.dtype if self.dtype is not None else types[0].dtype
        if dtype not in LAPACK_DTYPES:
            raise ValueError(f"operands must be f32, f64, complex<f32> or complex<f64>, got {types[0]}")
        matrix_rank = self._matrix_rank(op)
        if matrix_rank < 2:
            raise ValueError("takes batches of matrices (rank >= 2)")
        batch = types[0].shape[:matrix_rank - 2]
        for index, (kind, ttype) in enumerate(zip(self.operands, types)):
            want_dtype = INT if kind == INT_VECTOR else dtype
            want_rank = matrix_rank if kind == MATRIX else matrix_rank - 1
            if ttype.dtype != want_dtype or len(ttype.shape) != want_rank:
                raise ValueError(f"operand #{index} ({kind}) must be a rank-{want_rank} tensor of "
                                 f"{want_dtype}, got {ttype}")
            if ttype.shape[:len(batch)] != batch:
                raise ValueError(f"operand #{index} has batch dimensions {list(ttype.shape[:len(batch)])}, "
                                 f"operand #0 {list(batch)}")
        return dtype

    def _matrix_rank(self, op) -> int:
        return max(len(t.shape) for t in op.operand_types)

    def _check_results(self, op, expected) -> None:
        types = op.result_types
        if len(types) != len(expected):
            raise ValueError(f"has {len(expected)} results, got {len(types)}")
        for index, (ttype, (shape, dtype)) in enumerate(zip(types, expected)):
            ok = (isinstance(ttype, TensorType) and ttype.is_static and ttype.dtype == dtype
                  and (shape is None or tuple(ttype.shape) == tuple(shape)))
            if not ok:
                want = f"{list(shape)} of {dtype}" if shape is not None else f"a tensor of {dtype}"
                raise ValueError(f"result #{index} must be {want}, got {ttype}")

    def run(self, op, *operands):
        """The kernel: every problem of the batch through `solve`, on the
        operands as the kernel reads them; the results as XLA reads them."""
        if "lapack_broken" in op.cache:
            raise op.error(op.cache["lapack_broken"])
        dtype, options, (operand_layouts, result_layouts) = op.cache["lapack"]
        operands = [reread(np.asarray(x), given, kernel_s) for x, (given, kernel_s) in zip(operands, operand_layouts)]
        outputs = self._solve_all(operands, op, dtype, options)
        outputs = [reread(x, kernel_s, given) for x, (given, kernel_s) in zip(outputs, result_layouts)]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _solve_all(self, operands, op, dtype, options) -> list[np.ndarray]:
        outputs = [np.zeros(t.shape, t.dtype) for t in op.result_types]
        for result, operand in self.copies.items():
            outputs[result][...] = operands[operand]
        matrix_rank = max(x.ndim for x in operands)
        lapack = Lapack(dtype, self.routine)
        for index in np.ndindex(*operands[0].shape[:matrix_rank - 2]):
            problem = [x[index] for x in operands]
            if any(x.ndim == 2 and x.size == 0 for x in problem):
                continue
            for output, value in zip(outputs, self.solve(lapack, *problem, **options)):
                if value is not None:
                    output[index] = value
        return outputs


def lapack_target(routines: dict[str, str], *, results: Callable, operands=(MATRIX,),
                  options: dict | None = None, copies: dict | None = None) -> Callable:
    """Register the decorated `solve` for `lapack_<p><routine>_ffi`, for each
    prefix p of each entry of `routines` (e.g. {"sd": "orgqr", "cz": "ungqr"})."""

    def decorate(solve: Callable) -> Callable:
        for prefixes, routine in routines.items():
            for prefix in prefixes:
                add_target(Target(f"lapack_{prefix}{routine}_ffi", routine, PREFIX_DTYPES[prefix],
                                  tuple(operands), dict(options or {}), results, solve,
                                  dict(copies or {})))
        return solve

    return decorate


def square_matrices(a: tuple) -> tuple[tuple, int]:
    """(batch dimensions, n) of a batch of n x n matrices."""
    *batch, rows, cols = a
    if rows != cols:
        raise ValueError(f"takes square matrices, got {rows}x{cols}")
    return tuple(batch), cols


def add_target(target: Target) -> None:
    register_custom_call(target.name, validate=target.validate)(target.run)

