"""What goes in and out of one execution: donated arguments, result buffers.

Shared by single-device execution (`executable.py`) and multi-device
execution (`multi_device.py`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pjrt_ref.model.buffer import Buffer
from pjrt_ref.model.dtypes import BufferType, from_numpy
from pjrt_ref.errors import Internal, InvalidArgument


def donated_indices(exe, arguments: list[Buffer], non_donatable: set[int]) -> list[int]:
    """The argument positions this execution donates (`tf.aliasing_output` /
    `jax.buffer_donor`, less the caller's `non_donatable_input_indices`).

    A donated buffer passed at another position too (`f(donate(x), x)`) is
    refused, as XLA refuses it: the execution would delete a buffer it still reads.
    """
    donated = [i for i in exe.donor_indices if i < len(arguments) and i not in non_donatable]
    for index in donated:
        for other, buffer in enumerate(arguments):
            if other != index and buffer is arguments[index]:
                raise InvalidArgument(
                    f"argument {index} is donated and also passed as argument {other}: a buffer "
                    "cannot be donated and used again in the same execution (f(donate(x), x))")
    return donated


def delete_donated(arguments: list[Buffer], donated: list[int]) -> None:
    """Give the donated arguments up. One with external references (a numpy
    view of it lives) stays live, as on XLA CPU (`Buffer.donate`); results
    never share memory with arguments, so nothing else changes."""
    for index in donated:
        arguments[index].donate()


def output_buffers(exe, values: list, device, arguments: list[np.ndarray]) -> list[Buffer]:
    """`values` (the program's results on one device) as buffers on `device`.

    Element types are checked against the signature. A result that is an
    argument, a view of one, or another result (`jit(lambda x: (x, x))`)
    is copied: as on XLA, where each output is its own allocation unless
    the program donates an argument to it, every buffer owns its memory
    (`unsafe_buffer_pointer`, DLPack, and host views rely on that).
    """
    if len(values) != exe.num_outputs:
        raise Internal(f"program returned {len(values)} results, signature says {exe.num_outputs}")
    taken = {id(_memory_owner(array)) for array in arguments}
    buffers = []
    for index, (value, spec) in enumerate(zip(values, result_specs(exe, device))):
        array = result_array(index, value, spec.dtype)
        owner = id(_memory_owner(array))
        if owner in taken and array.size:
            array = array.copy()
            owner = id(array)
        taken.add(owner)
        buffers.append(Buffer(array, device, spec.memory, buffer_type=spec.buffer_type,
                              minor_to_major=spec.layout))
    return buffers


class ResultSpec(NamedTuple):
    """What a result's buffer is, the same for every execution on one device."""
    dtype: np.dtype | None          # None: a token
    buffer_type: BufferType
    memory: object                  # the device's memory of the result's kind
    layout: tuple | None            # minor_to_major to store it in; None: row-major


def result_specs(exe, device) -> tuple[ResultSpec, ...]:
    """Each result's `ResultSpec` on `device`, worked out on the first execution there."""
    specs = exe.result_specs.get(device)
    if specs is None:
        specs = exe.result_specs[device] = tuple(
            ResultSpec(getattr(ttype, "dtype", None), buffer_type_of(ttype), device.memory_of_kind(kind), layout)
            for ttype, kind, layout in zip(exe.output_types, exe.output_memory_kinds, exe.stored_output_layouts))
    return specs


def result_array(index: int, value, expected: np.dtype | None) -> np.ndarray:
    """Result `index` as a numpy array of its signature's element type `expected` (None: a token,
    which is a 0-size placeholder)."""
    if expected is None:
        return np.zeros((0,), np.bool_)
    array = value if type(value) is np.ndarray else np.asarray(value)
    if array.dtype != expected:
        raise Internal(f"result {index}: interpreter produced {array.dtype}, signature says {expected}")
    return array


def buffer_type_of(ttype) -> BufferType:
    """The PJRT element type of a result type (tokens are TOKEN buffers)."""
    dtype = getattr(ttype, "dtype", None)
    return BufferType.TOKEN if dtype is None else from_numpy(dtype)


def _memory_owner(array: np.ndarray) -> object:
    """The object whose memory `array` uses: follows numpy views back to their base."""
    while isinstance(array, np.ndarray):
        base = array.base
        if base is None:
            return array
        array = base
    return array
