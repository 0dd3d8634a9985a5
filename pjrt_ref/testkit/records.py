"""What the recording proxy kept (capi_shim/recording_proxy.c): read back.

The proxy writes into one folder, for a whole pytest process: each program
compiled on the plugin (`program-N.code` and its serialized compile options
`program-N.options`), and, for each execution inside a test, every argument
copied to the host (`argument-E-DEVICE-INDEX.bin`), with `index.tsv` saying
which is which. `read_records` turns that into `Records`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from pjrt_ref.model.dtypes import to_numpy


@dataclass
class Program:
    """One program compiled on the plugin (or loaded from serialized bytes)."""
    number: int
    format: str            # "mlir", "hlo", or "serialized" (nothing to replay)
    test: str              # the test that compiled it ("" outside a test)
    compiled: bool = False


@dataclass
class Argument:
    """One argument of one execution, as the plugin held it when the execution began."""
    device: int
    index: int
    buffer_type: int       # PJRT_Buffer_Type
    dims: tuple[int, ...]
    status: str            # "ok", "token", or why it was not kept
    path: str

    @property
    def kept(self) -> bool:
        return self.status == "ok"

    def value(self) -> np.ndarray:
        """The argument as numpy holds it (one element per byte for sub-byte types, as PJRT
        hosts copy them); ValueError if the plugin's copy has another size."""
        dtype = to_numpy(self.buffer_type)
        data = np.fromfile(self.path, dtype=np.uint8)
        expected = int(np.prod(self.dims, dtype=np.int64)) * dtype.itemsize
        if data.size != expected:
            raise ValueError(f"the plugin copied {data.size} bytes for {dtype}{list(self.dims)}, "
                             f"not {expected}")
        return data.view(dtype).reshape(self.dims)


@dataclass
class Execution:
    """One PJRT_LoadedExecutable_Execute inside a test."""
    number: int
    program: int           # 0: an executable the proxy did not see compiled
    devices: int
    argument_count: int    # on each device
    test: str
    arguments: list[Argument] = field(default_factory=list)
    outcome: str = ""      # "ok", "error", or "" (the process ended inside the call)

    def device_arguments(self, device: int = 0) -> list[Argument]:
        return sorted((a for a in self.arguments if a.device == device), key=lambda a: a.index)


@dataclass
class Records:
    directory: str
    programs: dict[int, Program] = field(default_factory=dict)
    executions: list[Execution] = field(default_factory=list)

    def program_path(self, number: int, part: str = "code") -> str:
        return os.path.join(self.directory, f"program-{number}.{part}")

    def tests(self) -> list[str]:
        seen = {p.test for p in self.programs.values()} | {e.test for e in self.executions}
        return sorted(t for t in seen if t)

    def of_test(self, test: str) -> tuple[list[Program], list[Execution]]:
        """The programs a test compiled and its executions (with the programs they ran)."""
        executions = [e for e in self.executions if e.test == test]
        numbers = {p.number for p in self.programs.values() if p.test == test}
        numbers |= {e.program for e in executions if e.program in self.programs}
        return [self.programs[n] for n in sorted(numbers)], executions


def read_records(directory: str) -> Records:
    """The records in `directory` (empty if the proxy wrote nothing there)."""
    records = Records(directory)
    index = os.path.join(directory, "index.tsv")
    if not os.path.exists(index):
        return records
    executions: dict[int, Execution] = {}
    with open(index, errors="replace") as handle:
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            kind, rest = fields[0], fields[1:]
            if kind == "program" and len(rest) >= 3:
                records.programs[int(rest[0])] = Program(int(rest[0]), rest[1], rest[2])
            elif kind == "compiled" and len(rest) >= 2 and int(rest[0]) in records.programs:
                records.programs[int(rest[0])].compiled = rest[1] == "ok"
            elif kind == "execution" and len(rest) >= 5:
                number = int(rest[0])
                executions[number] = Execution(number, int(rest[1]), int(rest[2]), int(rest[3]), rest[4])
            elif kind == "argument" and len(rest) >= 6 and int(rest[0]) in executions:
                number, device, position = int(rest[0]), int(rest[1]), int(rest[2])
                dims = tuple(int(d) for d in rest[4].split(",") if d)
                path = os.path.join(directory, f"argument-{number}-{device}-{position}.bin")
                executions[number].arguments.append(Argument(device, position, int(rest[3]), dims, rest[5], path))
            elif kind == "executed" and len(rest) >= 2 and int(rest[0]) in executions:
                executions[int(rest[0])].outcome = rest[1]
    records.executions = [executions[n] for n in sorted(executions)]
    return records
