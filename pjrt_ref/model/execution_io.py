"""What goes in and out of one execution: donated arguments, result buffers.

Shared by single-device execution (`executable.py`) and multi-device
execution (`multi_device.py`).
"""
from __future__ import annotations

import numpy as np

from .buffer import Buffer
from .dtypes import BufferType, from_numpy
from ..errors import Internal, InvalidArgument


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
    for index, (value, ttype) in enumerate(zip(values, exe.output_types)):
        array = result_array(index, value, ttype)
        owner = id(_memory_owner(array))
        if owner in taken and array.size:
            array = array.copy()
            owner = id(array)
        taken.add(owner)
        buffers.append(Buffer(array, device, device.memory_of_kind(exe.output_memory_kinds[index]),
                              buffer_type=buffer_type_of(ttype), minor_to_major=exe.stored_output_layouts[index]))
    return buffers


def result_array(index: int, value, ttype) -> np.ndarray:
    """Result `index` as a numpy array of its signature's element type (a token: a 0-size placeholder)."""
    array = np.asarray(value)
    expected = getattr(ttype, "dtype", None)
    if expected is None:
        return np.zeros((0,), np.bool_)
    if array.dtype != expected:
        raise Internal(f"result {index}: interpreter produced {array.dtype}, signature says {expected}")
    return array


def buffer_type_of(ttype) -> BufferType:
    """The PJRT element type of a result type (tokens are TOKEN buffers)."""
    dtype = getattr(ttype, "dtype", None)
    return BufferType.TOKEN if dtype is None else from_numpy(dtype)


def _memory_owner(array: np.ndarray) -> object:
    """The object whose memory `array` uses: follows numpy views back to their base."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array
