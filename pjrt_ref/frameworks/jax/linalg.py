"""Linear algebra for "pjrt_ref": JAX's CPU lowering rules, borrowed.

This is the one place where pjrt-ref lowers something JAX would otherwise
lower itself.

JAX lowers its linear-algebra primitives per platform. `eigh`, `svd`,
`eig`, `schur`, `hessenberg`, `tridiagonal` and `geqp3` have no lowering
for a platform JAX does not know, and `geqrf`/`householder_product` only
one to XLA's `Qr` / `ProductOfElementaryHouseholderReflectors` custom calls,
which no PJRT plugin can serve. On CPU, each of the primitives below is
lowered to a typed-FFI custom call `lapack_<p><routine>_ffi` that jaxlib
serves with LAPACK (jaxlib/cpu/lapack_kernels.cc), plus a little StableHLO
around it (INFO checks that fill failed results with NaN, 1-based pivots
made 0-based, ...).

pjrt-ref's interpreter serves those same targets with scipy.linalg.lapack
(interpreter/ops/lapack_*.py). So for every primitive below, the rule JAX
uses for "cpu" is registered for "pjrt_ref" as it is: results follow the
same LAPACK algorithms as on CPU, and programs exported for CPU (which carry
these custom calls) run on pjrt-ref too.

The rules are private to JAX. They are looked up in JAX's own table of
platform lowerings (`mlir._platform_specific_lowerings["cpu"]`), not by
function name, so a renamed rule is still found; if a primitive or its CPU
rule is missing from the installed JAX, the primitive gets a rule that
fails, naming the primitive and the JAX version, when a program uses it.
"""
from __future__ import annotations

from typing import Callable

# The primitives of jax._src.lax.linalg that JAX lowers differently on CPU
# (the `_p` suffix dropped). `cholesky` and `triangular_solve` have portable
# lowerings too (stablehlo.cholesky / triangular_solve, which pjrt-ref
# runs); the CPU ones use LAPACK, so results match CPU's.
CPU_LOWERED_PRIMITIVES = (
    "cholesky", "eig", "eigh", "geqp3", "geqrf", "hessenberg", "householder_product", "lu",
    "ormqr", "schur", "svd", "triangular_solve", "tridiagonal", "tridiagonal_solve",
)


def register_linalg_lowerings(platform: str) -> list[str]:
    """Register JAX's CPU lowering rule of each primitive above for `platform`.

    Returns the names of the primitives JAX lacked a CPU rule for (each now
    has a rule that raises NotImplementedError when used).
    """
    from jax._src.interpreters import mlir
    from jax._src.lax import linalg

    missing = []
    for name in CPU_LOWERED_PRIMITIVES:
        primitive = getattr(linalg, f"{name}_p", None)
        if primitive is None:
            missing.append(name)
            continue
        rule, inline = _cpu_rule(mlir, primitive)
        if rule is None:
            missing.append(name)
            rule, inline = _missing_rule(name, platform), True
        mlir.register_lowering(primitive, rule, platform=platform, inline=inline)
    return missing


def _cpu_rule(mlir, primitive) -> tuple[Callable | None, bool]:
    """JAX's CPU lowering rule of `primitive` and its `inline` flag, or (None, True)."""
    table = getattr(mlir, "_platform_specific_lowerings", {})
    entry = table.get("cpu", {}).get(primitive)
    if entry is None:
        return None, True
    return getattr(entry, "rule", entry), getattr(entry, "inline", True)


def _missing_rule(name: str, platform: str) -> Callable:
    def fail(ctx, *args, **params):
        import jax

        raise NotImplementedError(
            f"pjrt-ref lowers the linear-algebra primitive '{name}' for {platform} with JAX's CPU "
            f"lowering rule, and jax {jax.__version__} has none: pjrt-ref does not support this "
            "JAX version's linear algebra (see pjrt_ref/frameworks/jax/linalg.py)")

    return fail
