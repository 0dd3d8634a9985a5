"""`xla_dump_to`: the program a compile made, written where the user asked, as XLA does.

`jax.jit(f, compiler_options={"xla_dump_to": DIR})` (or XLA_FLAGS'
`--xla_dump_to`, which JAX passes the same way) asks XLA to write each
module it compiles into DIR; tools and tests read
`module_NNNN.<name>.*after_optimizations.txt` (HLO text) and, with
`xla_dump_hlo_as_proto`, `...after_optimizations.hlo.pb`. XLA also dumps a
module it loads from the persistent compilation cache.

pjrt-ref runs the StableHLO program itself, so there is no HLO pipeline to
dump stages of. For each compile (and each load of a serialized
executable) it writes:

- `module_NNNN.<name>.stablehlo.mlir`: the program exactly as it runs;
- `module_NNNN.<name>.before_optimizations.txt` and
  `...after_optimizations.txt`: the same program in XLA's HLO text
  (jaxlib's StableHLO -> HLO converter), identical because pjrt-ref
  rewrites no HLO; `.hlo.pb` twins with `xla_dump_hlo_as_proto`.

Options read: `xla_dump_to`, `xla_dump_hlo_as_text` (default on),
`xla_dump_hlo_as_proto`, `xla_dump_hlo_module_re`. A program the converter
cannot take still gets its `.stablehlo.mlir`. A directory that cannot be
written fails the compile with the path and the reason.
"""
from __future__ import annotations

import itertools
import os
import re
import threading

from pjrt_ref.errors import InvalidArgument

_NUMBERS = itertools.count()
_LOCK = threading.Lock()


def dump_if_asked(name: str, stablehlo_text: str, option_overrides) -> list[str]:
    """Write the dump files of one compiled module if its options ask; the paths written."""
    options = dict(option_overrides)
    directory = options.get("xla_dump_to")
    if not directory:
        return []
    pattern = options.get("xla_dump_hlo_module_re")
    if pattern and not re.search(str(pattern), name):
        return []
    with _LOCK:
        number = next(_NUMBERS)
    prefix = os.path.join(str(directory), f"module_{number:04d}.{_file_name(name)}")
    files = {f"{prefix}.stablehlo.mlir": stablehlo_text}
    hlo = _hlo(stablehlo_text)
    if hlo is not None:
        text, proto = hlo
        for stage in ("before_optimizations", "after_optimizations"):
            if _flag(options.get("xla_dump_hlo_as_text", True)):
                files[f"{prefix}.{stage}.txt"] = text
            if _flag(options.get("xla_dump_hlo_as_proto", False)):
                files[f"{prefix}.{stage}.hlo.pb"] = proto
    _write(str(directory), files)
    return sorted(files)


def _hlo(stablehlo_text: str) -> tuple[str, bytes] | None:
    """(HLO text, serialized HloModuleProto) of the program; None if jaxlib's converter refuses it."""
    from jax._src.lib import _jax

    try:
        computation = _jax.mlir.mlir_module_to_xla_computation(stablehlo_text, use_tuple_args=False,
                                                               return_tuple=False)
    except Exception:      # a construct the converter lacks: the .mlir file still says it all
        return None
    return computation.as_hlo_text(), computation.as_serialized_hlo_module_proto()


def _write(directory: str, files: dict) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
        for path, content in files.items():
            mode = "wb" if isinstance(content, bytes) else "w"
            with open(path, mode) as handle:
                handle.write(content)
    except OSError as error:
        raise InvalidArgument(f"xla_dump_to={directory!r}: cannot write the dump: {error}") from None


def _flag(value) -> bool:
    return value is True or str(value).lower() in ("true", "1")


def _file_name(name: str) -> str:
    return re.sub(r"[^\w.-]", "_", name) or "module"
