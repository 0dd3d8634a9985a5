"""The other backend, in a process of its own: `python -m pjrt_ref.debug.diff.worker SPEC [DEVICES]`.

SPEC is `cpu` (the XLA CPU client jaxlib ships) or the path of a PJRT plugin
shared library, which is loaded the way JAX loads any plugin
(`xla_bridge.register_plugin`, i.e. jaxlib's `make_c_api_client`). The
worker answers the reference (`backend.py`) over its stdin/stdout with
`protocol.py` messages:

    -> (start)                            <- {"description"} or {"error", "stage": "load"}
    -> {"key", "module"?} + arguments     <- results, or {"error", "stage": "compile" | "execute"}
    -> {"key", "module"?, "options", "devices"} + each device's arguments
                                          <- {"per_device"} + each device's results

`module` (a one-op StableHLO program) comes with the first request for its
key; the compiled executable is kept for the next ones. A request with
`options` (a serialized xla.CompileOptionsProto, base64) runs a program
compiled for `devices` devices (SPMD partitions, or replicas): arguments
and results go device by device, all of device 0's first. The worker
then has DEVICES devices: the cpu backend and pjrt-ref take the count from
`jax_num_cpu_devices`, a pjrt-ref plugin from PJRT_REF_NUM_DEVICES too.
Anything the plugin prints goes to stderr: stdout carries only messages.
"""
from __future__ import annotations

import base64
import logging
import os
import sys

import numpy as np

from pjrt_ref.debug.diff.protocol import Reader, write_message

# The name a plugin is registered under in the worker's JAX.
PLUGIN_PLATFORM = "diff_other"


def load_backend(spec: str, devices: int = 1):
    """jaxlib's client for `spec` (with 64-bit types on: arguments keep their types),
    with `devices` devices where the backend lets the host choose."""
    import jax

    jax.config.update("jax_enable_x64", True)
    if devices > 1:      # (a pjrt-ref plugin's count comes with the environment: backend.py)
        jax.config.update("jax_num_cpu_devices", devices)
    from jax._src import xla_bridge

    # Not JAX's warning that a plugin platform is "experimental": a crash
    # report quotes the last line of stderr, which should be the plugin's.
    logging.getLogger(xla_bridge.__name__).setLevel(logging.ERROR)

    if spec == "cpu":
        platform = "cpu"
    else:
        if not os.path.isfile(spec):
            raise FileNotFoundError(f"no such file: {spec} (expected `cpu` or the path of a PJRT plugin library)")
        platform = PLUGIN_PLATFORM
        xla_bridge.register_plugin(platform, library_path=spec)
    jax.config.update("jax_platforms", platform)
    return xla_bridge.get_backend(platform)


def describe(spec: str, backend) -> str:
    """`XLA cpu (jaxlib 0.10.2)`, or `PLATFORM (PATH)` for a plugin."""
    if spec == "cpu":
        import jaxlib

        return f"XLA cpu (jaxlib {jaxlib.__version__})"
    return f"{backend.platform} ({spec})"


def first_line(error: BaseException) -> str:
    """An error's message, cut to its first line (plugins' messages can be long)."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


class Worker:
    """Compiles programs on `backend` and runs them on its first device (or its first N)."""

    def __init__(self, backend) -> None:
        import jax
        from jax._src.lib import xla_client

        self.backend = backend
        self.device = backend.devices()[0]
        self.devices = xla_client.DeviceList((self.device,))
        self.options = xla_client.CompileOptions
        self.put = jax.device_put
        self.executables: dict[str, object] = {}

    def compile(self, key: str, module: str, options: bytes | None = None, devices: int = 1) -> None:
        if options is None:
            self.executables[key] = self.backend.compile_and_load(module, self.devices, self.options())
            return
        from jax._src.lib import xla_client

        chosen = self.backend.devices()[:devices]
        if len(chosen) < devices:
            raise ValueError(f"the program runs on {devices} devices; this backend has {len(chosen)}")
        parsed = self.options.ParseFromString(options)
        ids = np.array([d.id for d in chosen]).reshape(parsed.num_replicas, parsed.num_partitions)
        parsed.device_assignment = xla_client.DeviceAssignment.create(ids)
        self.executables[key] = self.backend.compile_and_load(module, xla_client.DeviceList(tuple(chosen)), parsed)

    def run(self, key: str, arguments: list) -> list:
        executable = self.executables[key]
        outputs = executable.execute([self.put(a, self.device) for a in arguments])
        return [np.asarray(output) for output in outputs]

    def run_on_devices(self, key: str, arguments: list, devices: int) -> tuple[int, list]:
        """(results per device, each device's results in turn) of a program on `devices`
        devices, `arguments` being each device's in turn. Each argument goes in as
        the devices' own pieces (any sharding whose pieces have their shape will
        do: the executable takes each device's piece as it is)."""
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        chosen = self.backend.devices()[:devices]
        count = len(arguments) // devices
        pieces = NamedSharding(Mesh(np.array(chosen), ("pieces",)), PartitionSpec())
        inputs = []
        for index in range(count):
            own = [arguments[device * count + index] for device in range(devices)]
            inputs.append(jax.make_array_from_single_device_arrays(
                own[0].shape, pieces, [self.put(piece, d) for piece, d in zip(own, chosen)]))
        outputs = self.executables[key].execute_sharded(inputs).disassemble_into_single_device_arrays()
        return len(outputs), [np.asarray(outputs[o][d]) for d in range(devices) for o in range(len(outputs))]

    def answer(self, header: dict, arguments: list) -> tuple[dict, list]:
        key = header["key"]
        options = base64.b64decode(header["options"]) if "options" in header else None
        devices = int(header.get("devices", 1))
        if "module" in header:
            try:
                self.compile(key, header["module"], options, devices)
            except Exception as error:  # the plugin's error, reported to the reference
                return {"error": first_line(error), "stage": "compile"}, []
        if key not in self.executables:
            return {"error": f"no program was sent for key {key}", "stage": "compile"}, []
        try:
            if options is None:
                return {}, self.run(key, arguments)
            per_device, results = self.run_on_devices(key, arguments, devices)
            return {"per_device": per_device}, results
        except Exception as error:
            return {"error": first_line(error), "stage": "execute"}, []


def main(argv: list[str]) -> int:
    # Messages go out on the real stdout; whatever else writes to fd 1 (the
    # plugin, JAX's warnings) lands on stderr instead.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    reader = Reader(sys.stdin.fileno())
    try:
        backend = load_backend(argv[0], int(argv[1]) if len(argv) > 1 else 1)
        worker = Worker(backend)
    except Exception as error:
        write_message(out, {"error": first_line(error), "stage": "load"})
        return 1
    write_message(out, {"description": describe(argv[0], backend)})
    while True:
        try:
            header, arguments = reader.read_message()
        except EOFError:   # the reference is done (or gone)
            return 0
        reply, results = worker.answer(header, arguments)
        write_message(out, reply, results)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
