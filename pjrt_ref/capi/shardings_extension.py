"""The PJRT Shardings extension (capi_shim/pjrt_layouts_shardings.h): a
compiled program's parameter and output shardings, as serialized
xla.OpSharding protos.

They are the shardings the program's optimized module carries
(`spmd.sharding_texts`, the same source PJRT_Executable_OptimizedProgram
uses): a partitioned program's, or `{replicated}` for a program over
several partitions without annotations. A program for one device carries
none, and both arrays are NULL: the host then leaves the shardings
unspecified, as it did when it read them from that module. HloSharding
text becomes an OpSharding through jaxlib's own parser (`jaxlib._hlo`,
which `jax._src.lib.xla_client` re-exports).
"""
from __future__ import annotations

from pjrt_ref.model.executable import Executable
from pjrt_ref.spmd import partitioner as spmd
from pjrt_ref.capi import cdata
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.cdata import Args, owned
from pjrt_ref.capi.executable import _executable


def _serialized(texts: list[str]) -> list[bytes]:
    from jaxlib import _hlo

    return [_hlo.HloSharding.from_string(t).to_proto().SerializeToString() for t in texts]


def _hand_out(args: Args, exe: Executable, key: str, texts: list[str] | None) -> None:
    """Point `shardings`/`sharding_sizes` at C arrays owned by `exe` (NULL without shardings)."""
    if texts is None:
        args.shardings = cdata.NULL
        args.sharding_sizes = cdata.NULL
        return

    def make():
        protos = _serialized(texts)
        keep = [cdata.ffi.new("char[]", p or b"\0") for p in protos]
        pointers = cdata.ffi.new("const char*[]", keep or [cdata.NULL])
        sizes = cdata.ffi.new("size_t[]", [len(p) for p in protos] or [0])
        return pointers, sizes, keep
    pointers, sizes, _ = owned(exe, ("shardings", key), make)
    args.shardings = pointers
    args.sharding_sizes = sizes


@entry_point("PJRT_Shardings_PJRT_Executable_ParameterShardings")
def executable_parameter_shardings(args: Args) -> None:
    """One OpSharding per parameter, or NULL arrays for a one-device program."""
    exe = _executable(args)
    shardings = spmd.sharding_texts(exe)
    args.num_parameters = len(exe.program.input_types)
    _hand_out(args, exe, "parameters", None if shardings is None else shardings[1])


@entry_point("PJRT_Shardings_PJRT_Executable_OutputShardings")
def executable_output_shardings(args: Args) -> None:
    """One OpSharding per output, or NULL arrays for a one-device program.

    A program with no results still has one: jaxlib checks the shardings
    against the HLO module's output, an empty tuple, whose sharding XLA
    keeps as one element (`spmd.output_sharding_elements`); with none it
    fails the compile ("the output sharding has 0 elements")."""
    exe = _executable(args)
    shardings = spmd.sharding_texts(exe)
    outputs = None if shardings is None else spmd.output_sharding_elements(shardings[0])
    args.num_outputs = len(exe.output_types) if outputs is None else len(outputs)
    _hand_out(args, exe, "outputs", outputs)
