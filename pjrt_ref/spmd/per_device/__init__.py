"""The per-device program of a partitioned executable (see `lowering.py`).

    lowered = lower_per_device(program_text, context, entry="main", devices=[0, 1, ...],
                            argument_layouts=..., result_layouts=...,
                            annotated_layouts=runner_callback, constraint_layout=runner_callback)

gives the module's text, its results' layouts and the ops that needed whole
operands (`PerDeviceProgram`), or raises `NotLowered` (with the reason) for a program that keeps running whole.
"""
from pjrt_ref.spmd.per_device.emit import NotLowered
from pjrt_ref.spmd.per_device.lowering import PerDeviceProgram, lower_per_device

__all__ = ["lower_per_device", "PerDeviceProgram", "NotLowered"]
