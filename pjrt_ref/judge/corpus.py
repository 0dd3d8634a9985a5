"""Programs and reproducers on disk, so a campaign can be replayed against any backend.

One folder per program: `program.mlir`, `inputs.json` (each input's element
type and shape) and `input-K.bin` (its raw bytes, little-endian, row-major):
no pickle, readable from any language. A reproducer's folder adds
`finding.json` (the verdict, its reason, both sides' results) and
`README.md` with the command that replays it.
"""
from __future__ import annotations

import json
import pathlib
import re

import numpy as np

from pjrt_ref.judge.programs import FuzzProgram, Node
from pjrt_ref.judge.values import dtype_of

_PROGRAM = "program.json"


def save_program(folder: pathlib.Path, program: FuzzProgram, inputs: list) -> None:
    """Write `program` (as MLIR and as data) and its inputs to `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "program.mlir").write_text(program.mlir())
    (folder / _PROGRAM).write_text(json.dumps(_as_data(program)))
    (folder / "inputs.json").write_text(json.dumps(
        [{"element_type": t, "shape": list(np.shape(x))} for t, x in zip(program.params, inputs)]))
    for k, x in enumerate(inputs):
        (folder / f"input-{k}.bin").write_bytes(np.ascontiguousarray(x).tobytes())


def load_program(folder: pathlib.Path) -> tuple[FuzzProgram, list]:
    """The program and inputs `save_program` wrote to `folder`."""
    program = _from_data(json.loads((folder / _PROGRAM).read_text()))
    described = json.loads((folder / "inputs.json").read_text())
    inputs = [np.frombuffer((folder / f"input-{k}.bin").read_bytes(), dtype_of(d["element_type"]))
              .reshape(d["shape"]).copy() for k, d in enumerate(described)]
    return program, inputs


def program_folders(root: pathlib.Path) -> list[pathlib.Path]:
    """Every saved program under `root` (itself, or its subfolders), in name order."""
    if (root / _PROGRAM).is_file():
        return [root]
    found = sorted(p.parent for p in root.glob(f"**/{_PROGRAM}"))
    if not found:
        raise FileNotFoundError(f"no saved programs under {root} (folders with {_PROGRAM})")
    return found


def save_finding(folder: pathlib.Path, finding, against: str) -> None:
    """A self-contained reproducer of `finding` in `folder`."""
    save_program(folder, finding.program, finding.inputs)
    (folder / "finding.json").write_text(json.dumps({
        "verdict": finding.verdict, "reason": finding.reason, "pjrt_ref": _shown(finding.ours),
        "other": _shown(finding.theirs), "against": against, "seed": finding.seed,
        "program_number": finding.number}, indent=1))
    inputs = ", ".join(f"{t} {_shown(x)}" for t, x in zip(finding.program.params, finding.inputs))
    (folder / "README.md").write_text(
        f"# {finding.verdict}\n\n{finding.reason}\n\n```mlir\n{finding.program.mlir()}```\n\n"
        f"Inputs: {inputs}\n\npjrt-ref: {_shown(finding.ours)}; {against}: {_shown(finding.theirs)}\n\n"
        f"Replay: `pjrt-ref fuzz --replay {folder} --against {against}`\n")


def _shown(value) -> str:
    if isinstance(value, np.ndarray) or np.isscalar(value):
        return re.sub(r"\s+", " ", repr(np.asarray(value).tolist()))
    return str(value)


def _as_data(program: FuzzProgram) -> dict:
    return {"shape": list(program.shape), "params": program.params,
            "nodes": [{"op": n.op, "operands": [list(v) for v in n.operands], "element_type": n.element_type,
                       "direction": n.direction, "shape": None if n.shape is None else list(n.shape),
                       "attrs": n.attrs} for n in program.nodes],
            "outputs": None if program.outputs is None else [list(v) for v in program.outputs],
            "param_shapes": None if program.param_shapes is None else [list(s) for s in program.param_shapes]}


def _from_data(data: dict) -> FuzzProgram:
    nodes = [Node(n["op"], tuple(tuple(v) for v in n["operands"]), n["element_type"], n["direction"],
                  None if n.get("shape") is None else tuple(n["shape"]), n.get("attrs"))
             for n in data["nodes"]]
    outputs = None if data["outputs"] is None else [tuple(v) for v in data["outputs"]]
    shapes = data.get("param_shapes")
    return FuzzProgram(tuple(data["shape"]), list(data["params"]), nodes, outputs,
                       None if shapes is None else [tuple(s) for s in shapes])
