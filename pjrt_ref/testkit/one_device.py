"""A program recorded on several devices, made into one that runs on one: where its
values go wrong, as opposed to how they are spread.

An SPMD program (a sharded `jit`) computes global values; its sharding
annotations only say where the pieces live. Taken out, the same program runs
on one device of each backend, and `pjrt-ref diff` can name its first
differing op. Programs written per device (a shard_map body, collectives,
GSPMD's manual regions) have no such form: `one_device_program` says so.
The global arguments are put back together from the devices' pieces by the
layouts pjrt-ref's partitioner reads from the program (`global_arguments`).
"""
from __future__ import annotations

import re

import numpy as np

from pjrt_ref.interpreter.loader import make_context
from pjrt_ref.model.compile_options import parse_compile_options
from pjrt_ref.spmd.gspmd import custom_call_target, walk

# Ops that exist only per device: a program with any of them has no one-device form.
_PER_DEVICE = ("sdy.manual_computation", "stablehlo.all_reduce", "stablehlo.all_gather",
               "stablehlo.reduce_scatter", "stablehlo.all_to_all", "stablehlo.collective_permute",
               "stablehlo.collective_broadcast", "stablehlo.partition_id", "stablehlo.replica_id",
               "SPMDFullToShardShape", "SPMDShardToFullShape")
_ANNOTATION_OPS = ("sdy.sharding_constraint", "sdy.reshard")
_SHARDING_ATTRIBUTE = re.compile(r'(?:,\s*)?(?:sdy\.sharding|mhlo\.sharding) = (?:#sdy\.sharding<[^>]*>|"[^"]*")')


def one_device_program(text: str) -> tuple[str | None, str]:
    """(the program without its sharding annotations, on one partition; or None, why not)."""
    from jaxlib.mlir import ir

    found = [name for name in _PER_DEVICE if name in text]
    if found:
        return None, f"it has per-device parts ({found[0]})"
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        for op in list(walk(module.operation)):
            if op.name in _ANNOTATION_OPS or custom_call_target(op) == "Sharding":
                op.results[0].replace_all_uses_with(op.operands[0])
                op.erase()
            elif op.name in ("sdy.sharding_group", "sdy.mesh"):
                op.erase()
        module.operation.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1)
        printed = module.operation.get_asm(enable_debug_info=True)
        # (printed generically while its attributes still name the meshes taken out)
        readable = ir.Module.parse(_SHARDING_ATTRIBUTE.sub("", printed))
        return readable.operation.get_asm(enable_debug_info=True), ""


def global_arguments(text: str, options: bytes, pieces: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Each argument whole, from `pieces[device][index]`, by the layouts pjrt-ref's
    partitioner reads from the program and its compile options."""
    from pjrt_ref.interpreter.program import load
    from pjrt_ref.spmd.partitioner import make_partitioned_runner

    program = load(text.encode())
    build = parse_compile_options(options)
    runner = make_partitioned_runner(program, num_partitions=max(build.num_partitions, 1),
                                     num_replicas=max(build.num_replicas, 1),
                                     parameters_left_open=build.parameters_left_to_propagation)
    whole = []
    for index, (layout, ttype) in enumerate(zip(runner.argument_layouts, program.input_types)):
        shards = {device: pieces[device][index] for device in range(len(pieces))}
        whole.append(layout.assemble(shards, tuple(ttype.shape), ttype.dtype, f"argument {index}"))
    return whole
