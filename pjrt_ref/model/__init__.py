"""The PJRT object model: what the C API's handles stand for.

`client.Client` (devices, memories, compile, host transfers) ·
`device.Device` · `memory.Memory` · `buffer.Buffer` · `event.Event` ·
`executable.Executable` / `LoadedExecutable` (one device; `multi_device.py`
for several) · `transfer.py` (host-to-device transfer managers) ·
`topology.Topology` · `dtypes.py` · `compile_options.py`, `xla_options.py`, `program_formats.py`
(what a compile is given). Below it: the partitioner (`pjrt_ref.spmd`), host
services, the cluster and the interpreter; above it: the C API layer, which
owns the table of handles given to C (capi/handles.py) and hears of buffer
deletions through `buffer.DELETION_LISTENERS`.
"""
