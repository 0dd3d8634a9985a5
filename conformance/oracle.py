"""StableHLO's C++ reference interpreter as the oracle of dynamic cases.

`reference_results(text, arguments, dimensions)` makes the
shape-polymorphic program static for `arguments` (`static_module`) and runs
it on `jaxlib.mlir.dialects.stablehlo.eval_module`. Both happen in a child
forked from the worker (so it starts with jaxlib loaded): the reference
interpreter aborts the process on ops it does not implement, and shape
refinement is C++ that may do the same. Whatever goes wrong in the child
becomes `OracleUnavailable` with its reason.
"""
from __future__ import annotations

import ctypes
import faulthandler
import io
import os
import pickle
import signal
import tempfile

import numpy as np

from pjrt_ref.interpreter.loader import make_context
from pjrt_ref.interpreter.types import ELEMENT_DTYPES

CHILD_TIME_LIMIT = 300  # seconds; the pool's per-case timeout is usually shorter
_PR_SET_PDEATHSIG = 1


class OracleUnavailable(Exception):
    """The reference interpreter could not run the program."""


def reference_results(text: str, arguments: list, dimensions: int) -> list[np.ndarray]:
    """@main of `text` run on the reference interpreter with `arguments`,
    of which the first `dimensions` are dimension sizes."""
    with tempfile.TemporaryFile() as output:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child never returns
            os.close(read_end)
            _child(write_end, output.fileno(), text, arguments, dimensions)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            payload = pipe.read()
        _, status = os.waitpid(pid, 0)
        if payload:
            kind, value = pickle.loads(payload)
            if kind == "results":
                return value
            raise OracleUnavailable(value)
        output.seek(0)
        last_words = output.read().decode("utf-8", "replace").strip()[-600:]
        how = (f"signal {signal.Signals(-os.waitstatus_to_exitcode(status)).name}"
               if os.WIFSIGNALED(status) else f"exit status {os.WEXITSTATUS(status)}")
        raise OracleUnavailable(f"the reference interpreter died ({how})"
                                + (f": {last_words}" if last_words else ""))


def _child(write_end: int, output_fd: int, text: str, arguments: list, dimensions: int):
    try:
        _die_with_parent()
        signal.alarm(CHILD_TIME_LIMIT)
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        if faulthandler.is_enabled():   # its dump of an abort goes with the rest, not to the parent's stderr
            faulthandler.enable(file=2)
        payload = pickle.dumps(("results", _evaluate(text, arguments, dimensions)))
    except OracleUnavailable as why:
        payload = pickle.dumps(("error", str(why)))
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        payload = pickle.dumps(("error", f"{type(error).__name__}: {error}"))
    with os.fdopen(write_end, "wb") as pipe:
        pipe.write(payload)
    os._exit(0)


def _die_with_parent() -> None:
    """When the pool kills the worker (a timeout), kill this child too."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the time limit still holds
        pass


def _evaluate(text: str, arguments: list, dimensions: int) -> list[np.ndarray]:
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    static = static_module(text, arguments, dimensions)
    with make_context() as context, ir.Location.unknown():
        context.enable_multithreading(False)
        module = ir.Module.parse(static)
        main = _main_function(module)
        block = main.regions[0].blocks[0]
        inputs = [_attribute(value, argument.type)
                  for value, argument in zip(arguments, block.arguments)]
        rewritten = _readable_results(main)
        return _arrays(stablehlo.eval_module(module, inputs), rewritten)


def static_module(text: str, arguments: list, dimensions: int) -> str:
    """`text` specialised to `arguments`: @main's argument types pinned to
    their shapes, the first `dimensions` arguments (dimension sizes) replaced
    by constants, shapes refined by XLA's `refine_polymorphic_shapes`, and
    `@shape_assertion` calls removed."""
    from jaxlib import _jax
    from jaxlib.mlir import ir

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        _pin_arguments(module, arguments, dimensions)
        bytecode = io.BytesIO()
        module.operation.write_bytecode(bytecode)
    try:
        refined = _jax.mlir.refine_polymorphic_shapes(
            bytecode.getvalue(), enable_shape_assertions=True, validate_static_shapes=True,
            enable_shardy=False)
    except Exception as error:  # noqa: BLE001
        raise OracleUnavailable(f"shape refinement failed: {error}") from None
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(refined)
        _drop_shape_assertions(module)
        return str(module)


def _main_function(module):
    from jaxlib.mlir import ir

    for op in module.body.operations:
        if op.operation.name == "func.func" and \
                ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op
    raise OracleUnavailable("the module has no @main")


def _pin_arguments(module, arguments: list, dimensions: int) -> None:
    """Replace @main's dimension-size arguments by constants, and give its
    arguments static types (upstream's `stablehlo-refine-arguments` pass,
    which wraps each one so its uses keep their `?` types until refinement)."""
    from jaxlib.mlir import ir, passmanager
    from jaxlib.mlir.dialects import stablehlo

    block = _main_function(module).regions[0].blocks[0]
    types = []
    for index, (argument, value) in enumerate(zip(block.arguments, arguments)):
        element_type = ir.RankedTensorType(argument.type).element_type
        static = ir.RankedTensorType.get(list(np.shape(value)), element_type)
        if index < dimensions:
            with ir.InsertionPoint.at_block_begin(block):
                constant = stablehlo.ConstantOp(_attribute(value, static))
            argument.replace_all_uses_with(constant.result)
        types.append(str(static))
    pipeline = f"builtin.module(stablehlo-refine-arguments{{types='{','.join(types)}'}})"
    passmanager.PassManager.parse(pipeline).run(module.operation)


def _drop_shape_assertions(module) -> None:
    from jaxlib.mlir import ir

    doomed = []

    def visit(op):
        if op.name == "stablehlo.custom_call" and \
                ir.StringAttr(op.attributes["call_target_name"]).value == "shape_assertion":
            doomed.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in doomed:
        op.erase()


def _attribute(value: np.ndarray, tensor_type):
    """A DenseElementsAttr of `value` with `tensor_type`'s element type
    (built from the raw bits: the bindings know no bf16, f8, ... buffers)."""
    from jaxlib.mlir import ir

    tensor_type = ir.RankedTensorType(tensor_type)
    value = np.asarray(value)
    if value.dtype.kind == "c":  # as pairs of floats (through 1-d: numpy views no 0-d array as another size)
        value = value.reshape(-1).view(value.real.dtype).reshape(value.shape + (2,))
    elif value.dtype.kind not in "biuf":  # an ml_dtypes type
        if value.dtype.itemsize * 8 != _bit_width(tensor_type.element_type):
            raise OracleUnavailable(f"cannot pass {tensor_type} arguments to the oracle")
        value = value.view(f"u{value.dtype.itemsize}")
    return ir.DenseElementsAttr.get(np.ascontiguousarray(value), type=tensor_type.element_type,
                                    shape=list(tensor_type.shape))


def _bit_width(element_type) -> int:
    from jaxlib.mlir import ir

    for kind in (ir.FloatType, ir.IntegerType):
        try:
            return kind(element_type).width
        except (ValueError, TypeError):
            continue
    return 0


def _readable_results(main) -> list[str]:
    """Rewrite @main to return only what numpy's buffer protocol can carry:
    a result of an ml_dtypes element type (bf16, f8, ...) becomes its bits
    (`bitcast_convert` to the signless integer of the same width), a complex
    result becomes two, its `real` and `imag` parts. Returns, per original
    result, its element type name if it was so rewritten, else ""."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    block = main.regions[0].blocks[0]
    ret = block.operations[len(block.operations) - 1]
    rewritten, values = [], []
    with ir.InsertionPoint(ret):
        for value in ret.operands:
            ttype = ir.RankedTensorType(value.type)
            element = str(ttype.element_type)
            if element.startswith("complex"):
                values += [stablehlo.RealOp(value).result, stablehlo.ImagOp(value).result]
            elif _needs_bits(element):
                width = _bit_width(ttype.element_type)
                if width % 8:
                    raise OracleUnavailable(f"cannot read {ttype} results from the oracle")
                bits = ir.RankedTensorType.get(ttype.shape, ir.IntegerType.get_signless(width))
                values.append(stablehlo.BitcastConvertOp(bits, value).result)
            else:
                values.append(value)
                element = ""
            rewritten.append(element)
        if any(rewritten):
            ir.Operation.create("func.return", operands=values)
    if any(rewritten):
        ret.erase()
        old = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        main.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(old.inputs, [v.type for v in values]))
    return rewritten


def _needs_bits(element: str) -> bool:
    return element.startswith(("bf", "f8", "f6", "f4")) or element == "tf32"


def _arrays(results: list, rewritten: list[str]) -> list[np.ndarray]:
    """The results as numpy arrays, undoing `_readable_results`."""
    plain = iter(np.array(result) for result in results)
    arrays = []
    for element in rewritten:
        if element.startswith("complex"):
            real, imag = next(plain), next(plain)
            joined = np.empty(real.shape, ELEMENT_DTYPES[element])  # not real + 1j * imag,
            joined.real, joined.imag = real, imag  # which turns an infinite part into NaN
            arrays.append(joined)
        elif element:
            arrays.append(next(plain).view(ELEMENT_DTYPES[element]))
        else:
            arrays.append(next(plain))
    return arrays
