"""A per-op cost model: flops, transcendentals and bytes accessed of a program.

What `PJRT_Executable_GetCostAnalysis` reports (pjrt_c_api.h: "a list of
PJRT_NamedValue" with XLA's HloCostAnalysis keys), so that JAX's
`compiled.cost_analysis()` works under pjrt-ref. The counting follows XLA's
`HloCostAnalysis` conventions, op by op, on the *unfused* plan (every
StableHLO op as written, before interpreter/optimiser fuses anything):

* elementwise ops: one flop per result element; exp, log, tanh, sqrt, sin,
  ... count as one *transcendental* per element instead (not as flops);
* dot_general: 2 * M * N * K (one multiply-add per contracted element pair);
* convolution: 2 * output batch * features * kernel input features * the
  (output, kernel) position pairs that read a real (unpadded) input element;
* reduce / reduce_window / scatter / select_and_scatter: the region's cost
  times the number of times it is applied (a sum over n elements is n - 1);
* while: condition + body once (trip counts are unknown before running);
  if/case: per property, the largest over the branches; func.call: the callee's cost; composite:
  its decomposition's cost;
* sort: n * ceil(log2 n);
* data movement (reshape, transpose, slice, broadcast, ...): no flops.

An op the model does not know (fft, cholesky, triangular_solve, custom_call
targets, ...) or whose attributes it cannot read counts 0 flops and adds 1
to "unmodelled ops" (so a cost query never fails a program that runs).

Bytes accessed: operand bytes + result bytes of every op (constants cost
nothing, as in XLA). `bytes accessed{i}{}` / `bytes accessedout{}` split the
total by operand index and result, like XLA's per-operand keys.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np

TRANSCENDENTAL = frozenset(
    "exponential exponential_minus_one log log_plus_one logistic power sqrt cbrt rsqrt tanh "
    "sine cosine tan atan2 erf acosh asinh atanh acos asin atan cosh sinh erf_inv lgamma "
    "digamma bessel_i1e polygamma zeta".split())

ELEMENTWISE = frozenset(
    "abs add and clamp compare complex convert count_leading_zeros divide floor ceil imag "
    "is_finite maximum minimum multiply negate not or popcnt real reduce_precision remainder "
    "round_nearest_afz round_nearest_even select shift_left shift_right_arithmetic "
    "shift_right_logical sign subtract xor next_after square".split()) | TRANSCENDENTAL

FREE = frozenset(
    "constant iota reshape transpose broadcast broadcast_in_dim slice dynamic_slice "
    "dynamic_update_slice concatenate pad reverse gather bitcast_convert get_tuple_element tuple "
    "optimization_barrier after_all create_token dynamic_reshape "
    "dynamic_broadcast_in_dim dynamic_iota get_dimension_size set_dimension_size "
    "real_dynamic_slice dynamic_pad rng rng_bit_generator infeed outfeed send recv "
    "partition_id replica_id all_gather all_to_all collective_permute collective_broadcast "
    "uniform_quantize uniform_dequantize".split())


def elements(ttype) -> int:
    """Number of elements of a tensor type (0 for tokens, dynamic dims count as 0)."""
    shape = getattr(ttype, "shape", None)
    if shape is None:
        return 0
    return int(np.prod([0 if d is None else int(d) for d in shape], dtype=np.int64))


def nbytes(ttype) -> int:
    """Bytes of a tensor type (0 for tokens)."""
    dtype = getattr(ttype, "dtype", None)
    return 0 if dtype is None else elements(ttype) * np.dtype(dtype).itemsize


def short_name(name: str) -> str:
    """`stablehlo.dot_general` -> `dot_general` (also chlo.*, mhlo.*)."""
    return name.split(".", 1)[-1]


class Cost(Counter):
    """A bag of properties: "flops", "transcendentals", "bytes accessed", ..."""

    def scaled(self, factor: float) -> "Cost":
        return Cost({key: value * factor for key, value in self.items()})

    def compute_only(self) -> "Cost":
        """Just the arithmetic (for a region applied per element: no buffer traffic)."""
        return Cost({k: v for k, v in self.items() if k in ("flops", "transcendentals")})


# ------------------------------------------------------------ op families
def _elementwise(step, name: str, program_cost) -> Cost:
    count = elements(step.op.result_types[0]) if step.op.result_types else 0
    return Cost({"transcendentals" if name in TRANSCENDENTAL else "flops": count})


def _dot_general(step, name: str, program_cost) -> Cost:
    lhs = step.op.operand_types[0]
    numbers = step.op.attrs.get("dot_dimension_numbers")
    contracting = getattr(numbers, "lhs_contracting_dimensions", ()) or ()
    width = int(np.prod([lhs.shape[d] or 0 for d in contracting], dtype=np.int64))
    return Cost({"flops": 2 * elements(step.op.result_types[0]) * width})


def _dot(step, name: str, program_cost) -> Cost:
    """stablehlo.dot: contracts lhs's last dim with rhs's first."""
    lhs = step.op.operand_types[0]
    width = (lhs.shape[-1] or 0) if lhs.shape else 1
    return Cost({"flops": 2 * elements(step.op.result_types[0]) * width})


def _convolution(step, name: str, program_cost) -> Cost:
    """2 * output batch * output features * kernel input features * valid taps.

    As XLA's HandleConvolution: only (output, kernel) position pairs that
    land on a real input element count, so padding and dilation holes are free.
    """
    attrs, numbers = step.op.attrs, step.op.attrs["dimension_numbers"]
    lhs, kernel = step.op.operand_types[0], step.op.operand_types[1]
    result = step.op.result_types[0]
    spatial = len(numbers.input_spatial_dimensions)
    padding = np.zeros((spatial, 2), np.int64) if attrs.get("padding") is None else \
        np.asarray(attrs["padding"], np.int64).reshape(spatial, 2)
    taps = 1
    for i in range(spatial):
        taps *= _valid_taps(
            lhs.shape[numbers.input_spatial_dimensions[i]] or 0,
            kernel.shape[numbers.kernel_spatial_dimensions[i]] or 0,
            result.shape[numbers.output_spatial_dimensions[i]] or 0,
            _nth(attrs.get("window_strides"), i), int(padding[i][0]),
            _nth(attrs.get("lhs_dilation"), i), _nth(attrs.get("rhs_dilation"), i))
    per_tap = (result.shape[numbers.output_batch_dimension] or 0) * \
        (result.shape[numbers.output_feature_dimension] or 0) * \
        (kernel.shape[numbers.kernel_input_feature_dimension] or 0)
    return Cost({"flops": 2 * per_tap * taps})


def _nth(values, i: int) -> int:
    return int(values[i]) if values is not None and len(values) > i else 1


def _valid_taps(size: int, window: int, out: int, stride: int, pad_low: int,
                lhs_dilation: int, rhs_dilation: int) -> int:
    """(output position, kernel position) pairs of one spatial dim reading a real input element."""
    dilated = (size - 1) * lhs_dilation + 1 if size else 0
    count = 0
    for o in range(out):
        for k in range(window):
            position = o * stride + k * rhs_dilation - pad_low
            if 0 <= position < dilated and position % lhs_dilation == 0:
                count += 1
    return count


def _region_cost(step, index: int, program_cost) -> Cost:
    if index >= len(step.regions):
        return Cost()
    return program_cost.block(step.regions[index]).compute_only()


def _reduce(step, name: str, program_cost) -> Cost:
    """reduce: the body runs (input elements - output elements) times."""
    applications = elements(step.op.operand_types[0]) - elements(step.op.result_types[0])
    return _region_cost(step, 0, program_cost).scaled(max(applications, 0))


def _reduce_window(step, name: str, program_cost) -> Cost:
    window = int(np.prod(step.op.attrs.get("window_dimensions") or (1,), dtype=np.int64))
    applications = elements(step.op.result_types[0]) * max(window - 1, 0)
    return _region_cost(step, 0, program_cost).scaled(applications)


def _scatter(step, name: str, program_cost) -> Cost:
    """scatter: the update computation runs once per update element."""
    half = (len(step.op.operand_types) - 1) // 2
    updates = step.op.operand_types[-1] if half <= 1 else step.op.operand_types[1 + half]
    return _region_cost(step, 0, program_cost).scaled(elements(updates))


def _select_and_scatter(step, name: str, program_cost) -> Cost:
    window = int(np.prod(step.op.attrs.get("window_dimensions") or (1,), dtype=np.int64))
    source = elements(step.op.operand_types[1])
    select = _region_cost(step, 0, program_cost).scaled(source * max(window - 1, 0))
    return select + _region_cost(step, 1, program_cost).scaled(source)


def _while(step, name: str, program_cost) -> Cost:
    total = Cost()
    for region in step.regions:
        total += program_cost.block(region)
    return total


def _branches(step, name: str, program_cost) -> Cost:
    """if/case: for each property, its largest value over the branches (as XLA's HandleConditional)."""
    total = Cost()
    for region in step.regions:
        for key, value in program_cost.block(region).items():
            total[key] = max(total[key], value)
    return total


def _call(step, name: str, program_cost) -> Cost:
    return program_cost.function(step.op.attrs["callee"])


def _composite(step, name: str, program_cost) -> Cost:
    """A composite costs what its decomposition (the function that defines it) costs."""
    return program_cost.function(step.op.attrs["decomposition"])


def _sort(step, name: str, program_cost) -> Cost:
    """sort: n * ceil(log2 n) comparisons, as XLA assumes (a comparison sort)."""
    n = elements(step.op.operand_types[0])
    return Cost({"flops": n * max(n - 1, 0).bit_length()})


def _free(step, name: str, program_cost) -> Cost:
    return Cost()


def _map(step, name: str, program_cost) -> Cost:
    """map / all_reduce / reduce_scatter: the region runs once per result element."""
    return _region_cost(step, 0, program_cost).scaled(sum(elements(t) for t in step.op.result_types))


def _unmodelled(step, name: str, program_cost) -> Cost:
    return Cost({"unmodelled ops": 1})


FAMILIES: dict[str, Callable] = {
    "dot_general": _dot_general, "dot": _dot, "convolution": _convolution,
    "reduce": _reduce, "reduce_window": _reduce_window, "scatter": _scatter,
    "select_and_scatter": _select_and_scatter, "while": _while, "if": _branches,
    "case": _branches, "call": _call, "composite": _composite, "sort": _sort,
    "map": _map, "all_reduce": _map, "reduce_scatter": _map,
}
NO_BYTES = frozenset({"constant", "get_tuple_element", "tuple", "call", "composite", "while", "if", "case",
                      "optimization_barrier", "after_all", "create_token"})


def _family_by_name(name: str) -> Callable:
    """Elementwise ops (chlo's broadcasting `broadcast_add` & co. too), data movement, or unknown."""
    if name in ELEMENTWISE or (name.startswith("broadcast_") and name[len("broadcast_"):] in ELEMENTWISE):
        return _elementwise
    return _free if name in FREE else _unmodelled


def op_cost(step, program_cost) -> Cost:
    """The cost of one planned step (`interpreter/steps.py` Step), regions included."""
    name = short_name(step.op.name)
    family = FAMILIES.get(name) or _family_by_name(name)
    try:
        cost = family(step, name, program_cost)
    except (KeyError, AttributeError, TypeError, IndexError, ValueError):
        cost = Cost({"unmodelled ops": 1})   # an attribute form the model does not know: no flops
    if name not in NO_BYTES:
        cost += _bytes(step.op)
    return cost


def _bytes(op) -> Cost:
    cost = Cost()
    for i, ttype in enumerate(op.operand_types):
        cost[f"bytes accessed{i}{{}}"] += nbytes(ttype)
    cost["bytes accessedout{}"] += sum(nbytes(t) for t in op.result_types)
    cost["bytes accessed"] += sum(nbytes(t) for t in op.operand_types) + cost["bytes accessedout{}"]
    return cost


class ProgramCost:
    """Costs of a module's functions on their unfused plans (memoized per function)."""

    def __init__(self, module_plan) -> None:
        self.module_plan = module_plan
        self._functions: dict[str, Cost] = {}

    def function(self, name: str) -> Cost:
        cost = self._functions.get(name)
        if cost is None:
            self._functions[name] = Cost()   # recursion guard: a recursive call counts once
            cost = self._functions[name] = self.block(unfused_plan(self.module_plan, name).body)
        return cost

    def block(self, region) -> Cost:
        total = Cost()
        for step in region.steps:
            total += op_cost(step, self)
        return total


def unfused_plan(module_plan, name: str):
    """The function's plan before plan-time fusion: every op visible."""
    return module_plan.unoptimized(name)


def planning_module(program):
    """A ModulePlan of the program's MLIR again (the program's own plan has
    let its MLIR go): what the unfused plans are made from."""
    from pjrt_ref.interpreter.plan import ModulePlan

    return ModulePlan.of_module(program.mlir_module())


def cost_analysis(program) -> dict[str, float]:
    """XLA-style cost properties of an `interpreter.Program`'s entry function."""
    cost = ProgramCost(planning_module(program)).function(program.entry)
    out = {key: float(value) for key, value in sorted(cost.items())}
    for key in ("flops", "transcendentals", "bytes accessed"):
        out.setdefault(key, 0.0)
    out["optimal_seconds"] = 0.0
    return out


def temp_bytes(program) -> int:
    """Peak bytes of intermediates alive at once in the entry function (unfused, no reuse
    inside an op): a value lives from the step that makes it to its last use."""
    body = unfused_plan(planning_module(program), program.entry).body
    last_use: dict[int, int] = {}
    for index, step in enumerate(body.steps):
        for slot in step.operands:
            last_use[slot] = index
    keep = set(body.result_slots)
    live: dict[int, int] = {}
    peak = 0
    for index, step in enumerate(body.steps):
        for slot, ttype in zip(step.results, step.op.result_types):
            if slot not in keep:
                live[slot] = nbytes(ttype)
        peak = max(peak, sum(live.values()))
        for slot in [s for s in live if last_use.get(s, -1) <= index]:
            del live[slot]
    return peak


def per_op(program) -> list[tuple[str, str, Cost]]:
    """(op name, location, cost) of each op of the entry function, regions folded in."""
    costs = ProgramCost(planning_module(program))
    body = unfused_plan(costs.module_plan, program.entry).body
    return [(step.op.name, step.op.location, op_cost(step, costs)) for step in body.steps]


def report(program, top: int = 10) -> str:
    """A readable cost report: totals, then the `top` ops by flops + transcendentals."""
    totals = cost_analysis(program)
    lines = [f"flops {totals['flops']:.0f}   transcendentals {totals['transcendentals']:.0f}   "
             f"bytes accessed {totals['bytes accessed']:.0f}   peak temp bytes {temp_bytes(program)}",
             "", f"{'flops':>12} {'transc.':>9} {'bytes':>10}  op  (location)"]
    ops = sorted(per_op(program), key=lambda item: -(item[2]["flops"] + item[2]["transcendentals"]))
    for name, location, cost in ops[:top]:
        lines.append(f"{cost['flops']:>12.0f} {cost['transcendentals']:>9.0f} "
                     f"{cost['bytes accessed']:>10.0f}  {name}  ({location})")
    return "\n".join(lines)
