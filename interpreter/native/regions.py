"""Region bodies compiled into scalar numba functions, for the kernels whose
bodies no single numpy call computes (a body they recognise as one ufunc runs as
that ufunc over the whole array):

* `scatter_applier(op)`: an update computation other than "replace" or one
  ufunc (several inputs, promoted types, longer bodies) runs per update
  element, in the interpreter's order, inside one numba loop;
* `map_applier(op)`: a `map` computation that is not element-wise on
  arrays runs once per element inside one numba loop;
* `folder(region, dtypes)`: reduce and reduce_window bodies that are not
  element-wise on arrays fold each window in one numba loop, in the
  interpreter's order;
* `sort_orderer(op)`: a comparator that is not a compare of one key (e.g.
  lexicographic on two keys) drives a stable merge sort in numba. Any stable
  sort gives the same permutation for a comparator that is a strict weak
  order, which the spec requires.

A body qualifies when `translator.Translator` translates it with every value
0-d (element-wise ops of f32/f64/i32/i64/i1, constants, inlined calls) and
it reads nothing from the enclosing function. Compiled functions are kept in
`op.cache` and, through numba's cache, on disk. Each returns None when the
body does not qualify or numba is switched off (PJRT_REF_JIT=0); the caller
then runs the region as before.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.native import codegen
from pjrt_ref.interpreter.native.scope import jit_enabled
from pjrt_ref.interpreter.native.translator import TYPE_NAMES, NotCompilable, Translator, compilable_tensor

_MISSING = object()


def scalar_function_lines(region, name: str, module) -> list[str]:
    """Source lines of `def name(p0, p1, ...)` returning the body's results."""
    translator = Translator((), module)
    for index, (slot, ttype) in enumerate(zip(region.arg_slots, region.arg_types)):
        compilable_tensor(ttype)
        if ttype.shape != ():
            raise NotCompilable("non-scalar block argument")
        translator.names[slot] = (f"p{index}", False)
    translator.steps(region.steps, lambda slot: slot)
    results = [translator.value(slot, None) for slot in region.result_slots]
    if translator.captures or translator.array_lines or any(kind for _, kind in results):
        raise NotCompilable("captures or non-scalar values")
    parameters = ", ".join(f"p{i}" for i in range(len(region.arg_slots)))
    lines = ["", "", "@njit(cache=True, error_model=\"numpy\")", f"def {name}({parameters}):"]
    lines += [f"    {line}" for line in translator.scalar_lines]
    lines.append(f"    return {', '.join(n for n, _ in results)},")
    return lines


def _cached(op, key: str, build):
    value = op.cache.get(key, _MISSING)
    if value is _MISSING:
        value = None
        if op.cache.get("jit_enabled", jit_enabled()):
            from numba.core.errors import NumbaError
            try:
                value = build()
            except (NotCompilable, NumbaError):
                value = None
        op.cache[key] = value
    return value


# --- scatter -------------------------------------------------------------------

def scatter_applier(op):
    """`apply(targets, results..., updates...)` or None (see the docstring)."""
    return _cached(op, "jit_scatter_apply", lambda: _build_scatter(op))


def _build_scatter(op):
    (region,) = op.region_plans
    count = len(region.result_slots)
    lines = scalar_function_lines(region, "body", op.module)  # checks the types
    arg_types = [TYPE_NAMES[t.dtype] for t in region.arg_types]
    results = [f"r{i}" for i in range(count)]
    updates = [f"u{i}" for i in range(count)]
    current = [f"{arg_types[i]}(r{i}[t])" for i in range(count)]
    new = [f"{arg_types[count + i]}(u{i}[position])" for i in range(count)]
    lines += ["", "", "@njit(cache=True, error_model=\"numpy\")",
              f"def apply(targets, {', '.join(results + updates)}):",
              "    for position in range(targets.size):",
              "        t = targets[position]",
              f"        values = body({', '.join(current + new)})"]
    lines += [f"        r{i}[t] = values[{i}]" for i in range(count)]
    source = codegen.with_prelude("\n".join(lines) + "\n")
    return codegen.load_generated(source).apply


# --- sort ------------------------------------------------------------------------

def sort_orderer(op):
    """`order(n, rows...) -> permutation` or None (see the docstring)."""
    return _cached(op, "jit_sort_order", lambda: _build_sort(op))


def _build_sort(op):
    (region,) = op.region_plans
    if len(region.result_slots) != 1 or len(region.arg_slots) % 2:
        raise NotCompilable("comparator")
    count = len(region.arg_slots) // 2
    rows = [f"k{i}" for i in range(count)]
    lines = scalar_function_lines(region, "less", op.module)

    def call(a: str, b: str) -> str:
        arguments = [f"{row}[{index}]" for row in rows for index in (a, b)]
        return f"less({', '.join(arguments)})[0]"

    lines += ["", "", "@njit(cache=True, error_model=\"numpy\")",
              f"def order(n, {', '.join(rows)}):",
              "    index = np.arange(n)",
              "    merged = np.empty(n, np.int64)",
              "    width = 1",
              "    while width < n:",
              "        for low in range(0, n, 2 * width):",
              "            middle = min(low + width, n)",
              "            high = min(low + 2 * width, n)",
              "            i, j, k = low, middle, low",
              "            while i < middle and j < high:",
              "                # the right element goes first only if strictly less: stable",
              f"                if {call('index[j]', 'index[i]')}:",
              "                    merged[k] = index[j]",
              "                    j += 1",
              "                else:",
              "                    merged[k] = index[i]",
              "                    i += 1",
              "                k += 1",
              "            while i < middle:",
              "                merged[k] = index[i]",
              "                i += 1",
              "                k += 1",
              "            while j < high:",
              "                merged[k] = index[j]",
              "                j += 1",
              "                k += 1",
              "        index, merged = merged, index",
              "        width *= 2",
              "    return index"]
    source = codegen.with_prelude("\n".join(lines) + "\n")
    return codegen.load_generated(source).order


def sort_order(orderer, rows: list) -> np.ndarray:
    """The stable permutation of each row (along the last axis) of `rows`."""
    n = rows[0].shape[-1]
    batch = rows[0].shape[:-1]
    order = np.empty(batch + (n,), np.int64)
    for position in np.ndindex(*batch):
        order[position] = orderer(n, *(np.ascontiguousarray(r[position]) for r in rows))
    return order


# --- map ---------------------------------------------------------------------------

def map_applier(op):
    """`apply(inputs..., out)` over flat arrays, or None (see the docstring)."""
    return _cached(op, "jit_map_apply", lambda: _build_map(op))


def _build_map(op):
    (region,) = op.region_plans
    if len(region.result_slots) != 1:
        raise NotCompilable("map with several results")
    lines = scalar_function_lines(region, "body", op.module)
    arg_types = [TYPE_NAMES[t.dtype] for t in region.arg_types]
    inputs = [f"x{i}" for i in range(len(region.arg_slots))]
    arguments = ", ".join(f"{t}({x}[i])" for t, x in zip(arg_types, inputs))
    lines += ["", "", "@njit(cache=True, error_model=\"numpy\")",
              f"def apply({', '.join(inputs)}, out):",
              "    for i in range(out.size):",
              f"        out[i] = body({arguments})[0]"]
    source = codegen.with_prelude("\n".join(lines) + "\n")
    return codegen.load_generated(source).apply


# --- sequential folds (reduce and reduce_window with general bodies) ------------------

def folder(region, dtypes) -> object:
    """`fold(values, inits) -> results` for `scalar_reduce`, or None.

    The same left fold as the interpreter's: for each output element,
    acc = inits, then acc = body(acc, x_k) for k in order, each result cast
    to its dtype. Cached on the region's plan, per result dtypes.
    """
    plan = region.plan
    cache = plan.__dict__.setdefault("jit_folds", {})
    key = tuple(np.dtype(d) for d in dtypes)
    if key not in cache:
        cache[key] = None
        if getattr(plan, "jit_enabled", jit_enabled()):
            from numba.core.errors import NumbaError
            try:
                cache[key] = _build_fold(plan, key)
            except (NotCompilable, NumbaError, KeyError):
                cache[key] = None
    return cache[key]


def _build_fold(plan, dtypes):
    module = plan.steps[0].op.module if plan.steps else None
    count = len(dtypes)
    if len(plan.arg_slots) != 2 * count:
        raise NotCompilable("fold arity")
    lines = scalar_function_lines(plan, "body", module)
    arg_types = [TYPE_NAMES[t.dtype] for t in plan.arg_types]
    result_types = [TYPE_NAMES[d] for d in dtypes]
    accs = [f"a{i}" for i in range(count)]
    inits = [f"i{i}" for i in range(count)]
    values = [f"v{i}" for i in range(count)]
    outs = [f"o{i}" for i in range(count)]
    arguments = [f"{t}({a})" for t, a in zip(arg_types, accs)]
    arguments += [f"{t}({v}[r, k])" for t, v in zip(arg_types[count:], values)]
    lines += ["", "", "@njit(cache=True, error_model=\"numpy\")",
              f"def fold({', '.join(inits + values + outs)}):",
              f"    for r in range({values[0]}.shape[0]):"]
    lines += [f"        {a} = {t}({i})" for a, t, i in zip(accs, result_types, inits)]
    lines += [f"        for k in range({values[0]}.shape[1]):",
              f"            new = body({', '.join(arguments)})"]
    lines += [f"            {a} = {t}(new[{n}])" for n, (a, t) in enumerate(zip(accs, result_types))]
    lines += [f"        {o}[r] = {a}" for o, a in zip(outs, accs)]
    source = codegen.with_prelude("\n".join(lines) + "\n")
    fold = codegen.load_generated(source).fold

    def run(values_list, init_values):
        out_shape = values_list[0].shape[:-1]
        n = values_list[0].shape[-1]
        if n == 0:
            return [np.full(out_shape, i, dtype=d) for i, d in zip(init_values, dtypes)]
        rows = [np.ascontiguousarray(v).reshape(-1, n) for v in values_list]
        outputs = [np.empty(rows[0].shape[0], d) for d in dtypes]
        initial = [np.asarray(i, dtype=d)[()] for i, d in zip(init_values, dtypes)]
        fold(*initial, *rows, *outputs)
        return [o.reshape(out_shape) for o in outputs]

    return run
