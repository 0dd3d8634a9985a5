"""The reference SPMD partitioner: one annotated program, many devices.

What JAX sends. `jax.jit` over `NamedSharding` inputs, and `shard_map`,
compile to ONE StableHLO module for all devices (`mhlo.num_partitions = N`)
whose values carry sharding annotations. JAX 0.10 uses Shardy by default
(`jax_use_shardy_partitioner`), and since the plugin accepts mixed
serialization (StableHLO >= 1.11) the `sdy` dialect arrives untouched:

    sdy.mesh @mesh = <["x"=4]>
    func.func public @main(%arg0: tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})
        -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}) {
      ...                                     // global shapes, no collectives
      %r = sdy.manual_computation(%x) in_shardings=[<@mesh, [{"x"}, {}]>]
             out_shardings=[<@mesh, [{}, {}]>] manual_axes={"x"} (%local: tensor<2x2xf32>) {
        %s = "stablehlo.all_reduce"(%local) ...  // shard_map's body: local shapes, collectives
        sdy.return %s : tensor<2x2xf32>
      } : (tensor<8x2xf32>) -> tensor<2x2xf32>

With `jax_use_shardy_partitioner=False` the same information comes in
GSPMD's spelling: `mhlo.sharding = "{devices=[4,1]<=[4]}"` strings on
arguments, results and `custom_call @Sharding`, and shard_map's body between
`custom_call @SPMDFullToShardShape` and `@SPMDShardToFullShape` (see
`layout.py` for both spellings of a sharding).

What this module does with it, correct by construction rather than fast:

1. At load time, read the sharding of every entry argument and result (a
   `Layout`: which tile of the global array each device holds).
2. Rewrite the program for one device (`per_device/`: tiles, collectives
   where layouts change) and run that on every device, each on its own
   thread. A program the rewrite leaves whole (`kept_whole_because`), or
   any with `PJRT_REF_SPMD_PER_DEVICE=0`, runs the other way: at execute
   time, put each global argument back together from the devices' shards,
   run the global program ONCE on the full arrays with the interpreter
   (sharding constraints are identities on global values), and cut each
   result into each device's shard. Nothing is communicated there because
   everything is computed everywhere.
3. A manual region (`sdy.manual_computation`, what `shard_map` produces)
   is the one place where the program itself is written per device: its
   operands are cut into each device's local shard (by the manual axes of
   its `in_shardings`), the body runs once per device, each on its own
   thread as process (0, partition) of the StableHLO process grid, so its
   collectives (psum, all_gather, ppermute, psum_scatter, ...) meet across
   devices exactly as the spec's process-grid semantics say; the local
   results are put back together by `out_shardings` (`manual.py`).
   GSPMD's manual regions are not region ops: at load time each one (the
   call between `@SPMDFullToShardShape` and `@SPMDShardToFullShape`) is made
   into one `@pjrt_ref.manual_call` op that runs the same way
   (`gspmd.py`); a region of any other shape makes the program run whole
   on every device instead (the global parts redundantly).
4. A program returning a manual region's result that is replicated over
   some of the region's manual axes (pmap's `out_axes=None`, shard_map's
   `out_specs=P()` with `check_vma=False`) also runs whole on every device:
   XLA inserts no communication there, so each device keeps its own value,
   which the one global run could not represent (`_kept_per_device`).

Interface used by the multi-device execute (`pjrt_ref/model/multi_device.py`):

    runner = make_partitioned_runner(program, num_partitions=N, num_replicas=1)
    # at compile/load time: reads the annotations from `program.mlir_module()`
    outputs = runner(per_device_arguments)
    # per_device_arguments[d] = device d's argument shards, d = replica * N + partition
    # outputs[d] = device d's output shards (numpy arrays)
    runner.argument_shard_shapes(d), runner.output_shard_shapes(d)
    # what PJRT reports per device: PJRT_Executable_OutputDimensions and the
    # buffers' dims for a partitioned executable are the per-device shard
    # shapes, not the global program's result types (jaxlib's IFRT takes the
    # per-device shapes from OutputDimensions when the compile options allow
    # sharding propagation to the outputs, as for shard_map).
    runner.optimized_program_text()
    # PJRT_Executable_OptimizedProgram: the C API client reads the
    # executable's parameter and output shardings from it (module attributes
    # mhlo.spmd_parameters_shardings / mhlo.spmd_output_sharding); JAX needs
    # them for outputs whose sharding it left to the compiler, and IFRT
    # derives every output's shard shape from them otherwise.

The runner touches no MLIR object when it runs. Programs with both
replicas and partitions (num_replicas > 1 and num_partitions > 1) are not
supported; JAX's jit and shard_map produce num_replicas = 1.
"""
from __future__ import annotations

import re
import threading

import numpy as np

from pjrt_ref import settings
from pjrt_ref.errors import InvalidArgument, PjrtRefError, Unimplemented
from pjrt_ref.interpreter.loader import make_context
from pjrt_ref.spmd.layout import (Layout, Mesh, gathered, hlo_sharding_text, parse_hlo_sharding, parse_manual_axes,
                          parse_mesh, parse_sharding_per_value, parse_tensor_sharding, replicated,
                          sharding_texts_per_value)
from pjrt_ref.spmd import custom_partitioning, inspect_sharding
from pjrt_ref.spmd.op_kinds import ELEMENTWISE, GROUP_SHARDING, SAME_VALUE_CALLS, reshape_groups
from pjrt_ref.spmd.gspmd import (MANUAL_CALL, OUT_SHARDINGS_ATTR, annotate_full_to_shard, attribute_text,
                                 custom_call_target, make_manual_calls)
from pjrt_ref.interpreter import observer
from pjrt_ref.interpreter.attributes import convert_attribute
from pjrt_ref.interpreter.location import describe_location
from pjrt_ref.interpreter.partitioned_run import current_partitioned_run, run_with
from pjrt_ref.interpreter.process_grid import ProcessGrid
from pjrt_ref.interpreter.process_hosts import share_among_hosts
from pjrt_ref.spmd.manual import PartitionedRun, run_on_grid
from pjrt_ref.spmd.per_device import NotLowered, lower_per_device
from pjrt_ref.spmd.unreduced import mark_reductions

__all__ = ["make_partitioned_runner", "runner_for_executable", "optimized_program_text", "PartitionedRunner",
           "current_partitioned_run"]


def make_partitioned_runner(program, *, num_partitions: int, num_replicas: int,
                            parameters_left_open: tuple[bool, ...] = ()) -> "PartitionedRunner":
    """A callable running `program` as an SPMD program over
    `num_replicas * num_partitions` devices (see the module docstring);
    `parameters_left_open`: the compile options' allow_spmd_sharding_propagation_to_parameters."""
    return PartitionedRunner(program, num_partitions=num_partitions, num_replicas=num_replicas,
                             parameters_left_open=parameters_left_open)


_RUNNERS_LOCK = threading.Lock()
# Text that marks a module as carrying sharding annotations (Shardy or GSPMD).
_SHARDING_MARKERS = ("sdy.sharding", "sdy.manual_computation", "sdy.mesh", "mhlo.sharding")


def runner_for_executable(exe) -> "PartitionedRunner | None":
    """`exe`'s partitioned runner, made once; None unless `exe` is an
    annotated program over several partitions (what the PJRT entry points
    that describe a partitioned executable need to know)."""
    if exe.num_partitions <= 1 or not any(m in exe.program.text for m in _SHARDING_MARKERS):
        return None
    runner = getattr(exe, "_spmd_runner", None)
    if runner is None:
        with _RUNNERS_LOCK:
            runner = getattr(exe, "_spmd_runner", None)
            if runner is None:
                runner = exe._spmd_runner = make_partitioned_runner(
                    exe.program, num_partitions=exe.num_partitions, num_replicas=exe.num_replicas,
                    parameters_left_open=exe.build_options.parameters_left_to_propagation)
    return runner


def optimized_program_text(exe) -> str:
    """What PJRT_Executable_OptimizedProgram returns for `exe`.

    A partitioned program's text carries its parameter and output shardings
    (`PartitionedRunner.optimized_program_text`). A program over several
    partitions without any sharding annotation runs whole on every device;
    XLA's partitioner gives its unannotated parameters and results the
    sharding `{replicated}` (its optimized HLO says so), and JAX, which left
    them unspecified (e.g. `jnp.array` under `jax.set_mesh`), takes them from
    there: without them it keeps an unspecified input sharding it cannot use.
    A program with ops XLA's MLIR-to-HLO conversion cannot take at all
    (`_UNCONVERTIBLE`) is returned as its signature (`_signature_stub`);
    any other program as compiled.
    """
    partitioned = runner_for_executable(exe)
    if partitioned is not None:
        return partitioned.optimized_program_text()
    shardings = sharding_texts(exe)
    if shardings is not None:
        outputs, parameters = shardings
        return _with_module_shardings(exe.program.text, _output_sharding_text(outputs), parameters)
    if _UNCONVERTIBLE.search(exe.program.text):
        return _signature_stub(exe.program, 1, _output_sharding_text(["{replicated}"] * exe.num_outputs),
                               ["{replicated}"] * len(exe.program.input_types))
    return exe.program.text


def sharding_texts(exe) -> tuple[list[str], list[str]] | None:
    """(each output's, each parameter's) sharding in HloSharding text, as the
    module `optimized_program_text` returns carries them; None for a
    program that carries none (it runs on one device). What the Shardings
    extension answers (pjrt_ref/capi/shardings_extension.py)."""
    partitioned = runner_for_executable(exe)
    if partitioned is not None:
        return partitioned.output_sharding_texts(), partitioned.argument_sharding_texts()
    if exe.num_partitions > 1 and _converts_to_hlo(exe.program.text):
        return (["{replicated}"] * len(exe.program.output_types),
                ["{replicated}"] * len(exe.program.input_types))
    return None


def output_sharding_elements(outputs: list[str]) -> list[str]:
    """The elements of `_output_sharding_text(outputs)`: the outputs'
    shardings, or the one element of the empty tuple's."""
    return outputs or ["{replicated}"]


def _output_sharding_text(outputs: list[str]) -> str:
    """`mhlo.spmd_output_sharding`: one result's sharding, or a tuple sharding
    of all. A program with no results has an empty tuple, whose sharding XLA
    keeps as one element (`HloSharding::SingleTuple`); XLA's client refuses
    "{}" ("the output sharding has 0 elements")."""
    if not outputs:
        return "{{replicated}}"
    return outputs[0] if len(outputs) == 1 else "{" + ", ".join(outputs) + "}"


def load_per_device_gspmd(text: str):
    """A GSPMD program loaded to run whole on every device: each
    `@SPMDFullToShardShape` told its operand's sharding (`annotate_full_to_shard`)."""
    from pjrt_ref.interpreter.program import load

    return load(annotate_full_to_shard(text))



class PartitionedRunner:
    """`program` planned for N partitions: argument/result layouts and meshes."""

    def __init__(self, program, *, num_partitions: int, num_replicas: int,
                 custom_calls_partitioned: bool = False, parameters_left_open: tuple[bool, ...] = ()) -> None:
        if num_replicas != 1 and num_partitions != 1:
            raise Unimplemented(f"a program with {num_replicas} replicas x {num_partitions} "
                                "partitions: the reference partitioner runs one replica")
        if not custom_calls_partitioned and custom_partitioning.TARGET in program.text:
            program = self._with_custom_calls_partitioned(program, num_partitions, num_replicas)
        self.program = program
        self.num_partitions = num_partitions
        self.num_replicas = num_replicas
        self.devices = list(range(num_partitions * num_replicas))
        self._optimized_text: str | None = None
        # GSPMD manual regions become @pjrt_ref.manual_call ops (gspmd.py); a
        # program with one that does not fit that shape runs whole on every
        # device, its SPMDFullToShardShape ops told their operand's sharding.
        self.global_program = program
        self.per_device_program = None
        if "SPMDFullToShardShape" in program.text:
            from pjrt_ref.interpreter.program import load
            text, left = make_manual_calls(program.text)
            if left:
                self.per_device_program = load_per_device_gspmd(text)
            else:
                self.global_program = load(text)
        elif "unreduced" in program.text:
            self.per_device_program = _with_reductions_marked(program)
        module = program.mlir_module()
        self.meshes = _read_meshes(module)
        func = _entry_function(module, program.entry)
        arg_attrs = _attr_dicts(func, "arg_attrs", len(program.input_types))
        res_attrs = _attr_dicts(func, "res_attrs", len(program.output_types))
        self.argument_layouts = [self._layout(attrs, t)
                                 for attrs, t in zip(arg_attrs, program.input_types)]
        returned = _returned_values(func)
        self._groups = _sharding_groups(module)    # value -> the others of its sharding group
        self._inherited: dict = {}      # _inherited_layout's answers, by (value, calls)
        self.layout_visits = 0          # values _inherited_layout looked at (its tests count them)
        self._choose_open_parameters(func, arg_attrs, res_attrs, returned, parameters_left_open)
        self.result_layouts = [
            self._layout(attrs, t) if _annotated(attrs) else self._chosen_result_layout(value, _shape(t))
            for attrs, t, value in zip(res_attrs, program.output_types, returned)]
        if self.per_device_program is None and any(self._kept_per_device(v) for v in returned):
            self.global_program = program
            self.per_device_program = (load_per_device_gspmd(program.text)
                                       if "SPMDFullToShardShape" in program.text else program)
        for i, (layout, t) in enumerate(zip(self.argument_layouts, program.input_types)):
            layout.shard_shape(_shape(t), f"argument {i} of @{program.entry}")
        for i, (layout, t) in enumerate(zip(self.result_layouts, program.output_types)):
            layout.shard_shape(_shape(t), f"result {i} of @{program.entry}")
        self.lowered = None             # the per-device program (per_device/), or None: the program runs whole
        self.kept_whole_because = None
        self.gathered_for: tuple[str, ...] = ()
        unreduced_only = "unreduced" in program.text and "SPMDFullToShardShape" not in program.text
        if not settings.get("PJRT_REF_SPMD_PER_DEVICE"):
            self.kept_whole_because = "PJRT_REF_SPMD_PER_DEVICE=0"
        elif num_replicas != 1:
            self.kept_whole_because = f"{num_replicas} replicas"
        elif self.per_device_program is not None and not unreduced_only:
            self.kept_whole_because = "the program has manual regions or results kept per device"
        else:
            self._lower_per_device([not _annotated(attrs) for attrs in res_attrs])
        if inspect_sharding.TARGET in program.text:     # jax.debug.inspect_array_sharding's callbacks
            inspect_sharding.report(module, self._sharding_proto_of,
                                    lambda op: f"'{op.name}' at {describe_location(op.location)}")

    def _lower_per_device(self, open_results: list[bool]) -> None:
        """Rewrite the program for one device (`per_device.lower_per_device`) and
        load it; a program that keeps running whole says why in `kept_whole_because`."""
        from pjrt_ref.interpreter.program import load

        try:
            lowered = lower_per_device(
                self.program.text, make_context(), entry=self.program.entry, devices=self.devices,
                argument_layouts=self.argument_layouts, result_layouts=self.result_layouts,
                annotated_layouts=self._annotated_layouts, constraint_layout=self._constraint_layout,
                open_results=open_results)
            self.lowered = load(lowered.text, self.program.entry)
            self.result_layouts = lowered.result_layouts
            self.gathered_for = lowered.gathered_for
        except NotLowered as reason:
            self.kept_whole_because = str(reason)
        except PjrtRefError as error:       # the rewrite made a program the interpreter refuses
            self.kept_whole_because = f"the per-device program was refused: {error}"
        except Exception as error:          # a rewrite that failed must not fail the program
            self.kept_whole_because = f"the rewrite failed: {type(error).__name__}: {error}"

    def _annotated_layouts(self, op) -> list[Layout] | None:
        """The layouts `op`'s own sharding annotation gives its results."""
        texts = self.annotated_shardings(op)
        if texts is None or len(texts) != len(op.results):
            return None
        return [parse_hlo_sharding(text, len(_shape_of(result)), self.devices)
                for text, result in zip(texts, op.results)]

    def _sharding_proto_of(self, value) -> bytes:
        """The serialized xla.OpSharding of the layout propagation gives `value`."""
        return custom_partitioning.sharding_proto(hlo_sharding_text(self.proposed_layout(value), self.devices))

    def _choose_open_parameters(self, func, arg_attrs: list, res_attrs: list, returned: list,
                                left_open: tuple[bool, ...]) -> None:
        """Parameters JAX left to the compiler (no sharding of their own, and left open by the
        compile options' `allow_spmd_sharding_propagation_to_parameters`: an uncommitted
        argument of a jit) take the layout their uses give (`_layout_from_uses`), as XLA's
        propagation gives one to such a parameter; replicated if none does. PJRT reports it
        (`argument_sharding_texts`) and JAX places the argument so before it calls."""
        chosen = [i for i, attrs in enumerate(arg_attrs)
                  if not _annotated(attrs) and left_open and left_open[min(i, len(left_open) - 1)]]
        if not chosen:
            return
        for i in chosen:                   # unknown while choosing: no open parameter is anyone's source
            self.argument_layouts[i] = None
        arguments = func.regions[0].blocks[0].arguments
        results_at: dict = {}
        for index, value in enumerate(returned):
            if _annotated(res_attrs[index]):
                results_at.setdefault(value.maybe_downcast(), []).append(index)
        layouts = {i: self._layout_from_uses(arguments[i].maybe_downcast(), results_at, res_attrs)
                   for i in chosen}
        for i, layout in layouts.items():
            ttype = self.program.input_types[i]
            self.argument_layouts[i] = (layout.split_evenly(_shape(ttype)) if layout is not None
                                        else replicated(len(_shape(ttype)), self.devices))
        self._inherited.clear()            # answers given while they were unknown

    def _layout_from_uses(self, value, results_at: dict, res_attrs: list) -> Layout | None:
        """The layout the uses of an open parameter give it: following it forward through
        element-wise ops of its shape, the first sharding constraint it meets, the layout
        another member of a sharding group it is in (`shard_alike`) has, or the sharding a
        result it is returned as carries."""
        seen, queue = {value}, [value]
        while queue:
            value = queue.pop(0)
            for other in self._groups.get(value, ()):
                found = self._inherited_layout(other)
                if found is not None:
                    return found
            for index in results_at.get(value, ()):
                return self._layout(res_attrs[index], self.program.output_types[index])
            for use in value.uses:
                op = use.owner
                op = getattr(op, "operation", op)
                constrained = self._constraint_layout(op, value)
                if constrained is not None:
                    return constrained
                if op.name in ELEMENTWISE or _passes_value_on(op):
                    for result in op.results:
                        result = result.maybe_downcast()
                        if _shape_of(result) == _shape_of(value) and result not in seen:
                            seen.add(result)
                            queue.append(result)
        return None

    def _constraint_layout(self, op, value) -> Layout | None:
        """The layout a sharding constraint `op` on `value` pins (none where it leaves dimensions open)."""
        if op.name in ("sdy.sharding_constraint", "sdy.reshard"):
            text = attribute_text(op.attributes["sharding"])
            return self._sdy_layout(text, len(_shape_of(value))) if _open_unsplit_dims(text) is None else None
        if custom_call_target(op) == "Sharding" and "mhlo.sharding" in op.attributes:
            attrs = _attribute_texts(op)
            text = attrs["mhlo.sharding"]
            if GROUP_SHARDING.search(text) or _gspmd_open_dims(op, attrs, len(_shape_of(value))) is not None:
                return None
            return parse_hlo_sharding(text, len(_shape_of(value)), self.devices)
        return None

    @staticmethod
    def _with_custom_calls_partitioned(program, num_partitions: int, num_replicas: int):
        """`program` with its @CustomSPMDPartitioning calls partitioned by their
        callbacks (custom_partitioning.py), which are asked about the shardings
        a partitioner of the program as it stands proposes."""
        from pjrt_ref.interpreter.program import load

        proposer = PartitionedRunner(program, num_partitions=num_partitions, num_replicas=num_replicas,
                                     custom_calls_partitioned=True)
        return load(custom_partitioning.partition_calls(
            program, proposer.proposed_layout, proposer.annotated_shardings, proposer.devices))

    def proposed_layout(self, value) -> Layout:
        """The layout propagation gives `value` (`_chosen_result_layout`)."""
        return self._chosen_result_layout(value, _shape_of(value))

    def annotated_shardings(self, op) -> list[str] | None:
        """The HloSharding texts of `op`'s results as its own `sdy.sharding` or
        `mhlo.sharding` says, None when it says nothing."""
        if "sdy.sharding" in op.attributes:
            per_value = parse_sharding_per_value(attribute_text(op.attributes["sdy.sharding"]))
            return [hlo_sharding_text(s.layout(self.meshes), self.devices) for s in per_value]
        if "mhlo.sharding" in op.attributes:
            return custom_partitioning.sharding_elements(attribute_text(op.attributes["mhlo.sharding"]),
                                                         len(op.results))
        return None

    # -- what PJRT reports per device --------------------------------------
    def argument_shard_shapes(self, device: int) -> list[tuple[int, ...]]:
        """The shapes of `device`'s argument shards (shardings are even, so
        every device's are the same)."""
        return [layout.shard_shape(_shape(t), f"argument {i}")
                for i, (layout, t) in enumerate(zip(self.argument_layouts, self.program.input_types))]

    def output_shard_shapes(self, device: int) -> list[tuple[int, ...]]:
        """The shapes of `device`'s output shards: PJRT_Executable_OutputDimensions."""
        return [layout.shard_shape(_shape(t), f"result {i}")
                for i, (layout, t) in enumerate(zip(self.result_layouts, self.program.output_types))]

    def output_sharding_texts(self) -> list[str]:
        """Each result's sharding in HloSharding text (`{devices=[4,1]0,1,2,3}`)."""
        return [hlo_sharding_text(layout, self.devices) for layout in self.result_layouts]

    def argument_sharding_texts(self) -> list[str]:
        """Each argument's sharding in HloSharding text."""
        return [hlo_sharding_text(layout, self.devices) for layout in self.argument_layouts]

    def optimized_program_text(self) -> str:
        """What PJRT_Executable_OptimizedProgram returns for a partitioned program.

        The C API client reads an executable's parameter and output
        shardings from this text (`PjRtExecutable::GetOutputShardings` ->
        `GetHloModules` converts the returned MLIR to an HloModule and reads
        its `spmd_output_sharding` / `spmd_parameters_shardings`, which the
        conversion takes from the module attributes of the same names). JAX
        needs them for results whose sharding it left to the compiler
        (shard_map's outputs, jit without out_shardings) and checks them
        against the ones it asked for.
        """
        if self._optimized_text is None:
            output = _output_sharding_text(self.output_sharding_texts())
            if self.lowered is not None:
                text = _with_module_shardings(self.lowered.text, output, self.argument_sharding_texts())
            elif _converts_to_hlo(self.program.text):
                text = _with_module_shardings(self.program.text, output,
                                              self.argument_sharding_texts())
            else:
                text = _signature_stub(self.program, self.num_partitions, output,
                                       self.argument_sharding_texts())
            self._optimized_text = text
        return self._optimized_text

    # -- execute -----------------------------------------------------------
    def __call__(self, per_device_arguments: list[list[np.ndarray]], ids=None,
                 placement=None) -> list[list[np.ndarray]]:
        """Each device's argument shards -> each device's output shards.

        `ids` are the (replica, partition) of the devices whose arguments are
        given (default: every device, in order). With a `placement` (the
        devices are spread over processes, see multi_device.host_placement)
        they are this process's devices: the processes first share their
        shards, then each runs the global program and keeps its devices'
        shards of the results.
        """
        devices = (self.devices if ids is None
                   else [replica * self.num_partitions + partition for replica, partition in ids])
        if len(per_device_arguments) != len(devices):
            raise InvalidArgument(f"the partitioned program runs on {len(devices)} devices here, "
                                  f"got arguments for {len(per_device_arguments)}")
        shards = dict(zip(devices, per_device_arguments))
        if self.lowered is not None:
            results = self.run_lowered(shards, placement)
            return [results[d] for d in devices]
        if placement is not None:
            shards = self.shards_of_every_device(shards, placement)
        if sorted(shards) != self.devices:
            raise InvalidArgument(f"the partitioned program runs on {len(self.devices)} devices, "
                                  f"got arguments for {len(shards)}")
        per_device_arguments = [shards[d] for d in self.devices]
        if self.per_device_program is None:
            global_arguments = self.assemble_arguments(per_device_arguments)
            run = PartitionedRun(self.meshes, self.num_replicas, self.num_partitions,
                                 placement=placement)
            results = run_with(run, lambda: _run_program(self.global_program, global_arguments))
            per_device_results = {d: results for d in devices}
        else:
            per_device_results = self.run_on_every_device(per_device_arguments, placement)
        return [[layout.cut(np.asarray(result), device, f"result {i}")
                 for i, (layout, result) in enumerate(zip(self.result_layouts, per_device_results[device]))]
                for device in devices]

    def run_lowered(self, shards: dict, placement=None) -> dict:
        """The per-device program on each device given ({device: its argument shards}),
        one thread each; with a `placement` these are this process's devices, and the
        program's collectives meet the other processes' devices through its transport."""
        program = self.lowered
        if placement is None and sorted(shards) != self.devices:
            raise InvalidArgument(f"the partitioned program runs on {len(self.devices)} devices, "
                                  f"got arguments for {len(shards)}")
        self.check_shards(shards)
        run = PartitionedRun(self.meshes, self.num_replicas, self.num_partitions, per_device=True)
        function = observer.current.function(program)

        def job(device: int):
            if device not in shards:            # another process's device
                return None
            arguments = program.check_arguments(shards[device])
            return lambda: run_with(run, lambda: function.run(list(arguments)))
        results = run_on_grid(None, self.num_replicas, self.num_partitions, [job(d) for d in self.devices],
                              None if placement is None else placement.child("per-device program"))
        return {d: [np.asarray(r) for r in results[d]] for d in shards}

    def check_shards(self, per_device_arguments: dict) -> None:
        """Each device's argument shards must have the shard shapes and element types
        the program takes; the error names the device."""
        for device, shards in sorted(per_device_arguments.items()):
            if len(shards) != len(self.program.input_types):
                raise InvalidArgument(f"@{self.program.entry} takes {len(self.program.input_types)} "
                                      f"argument(s); device {device} passed {len(shards)}")
            for i, (shard, shape, ttype) in enumerate(zip(shards, self.argument_shard_shapes(device),
                                                         self.program.input_types)):
                if not hasattr(ttype, "dtype"):
                    continue
                what = f"argument {i} of @{self.program.entry}"
                shard = np.asarray(shard)
                if shard.dtype != np.dtype(ttype.dtype):
                    raise InvalidArgument(f"{what}: device {device}'s shard has element type "
                                          f"{shard.dtype}, the program takes {np.dtype(ttype.dtype)}")
                if tuple(shard.shape) != tuple(shape):
                    raise InvalidArgument(f"{what}: device {device}'s shard has shape "
                                          f"{list(shard.shape)}, the sharding needs {list(shape)}")

    def shards_of_every_device(self, shards: dict, placement) -> dict:
        """{device: its argument shards} for every device, from this process's
        (the processes send theirs to each other through the placement's transport)."""

        grid = ProcessGrid(self.num_replicas, self.num_partitions,
                           placement=placement.child("argument shards"))
        what = f"@{_module_name(self.program.text)}: gathering the argument shards"
        shared = share_among_hosts(grid, "shards", {self._process_id(d): v for d, v in shards.items()},
                                   what)
        every = {replica * self.num_partitions + partition: value
                 for (replica, partition), value in shared.items()}
        self.check_shard_types(every, grid, what)
        return every

    def check_shard_types(self, shards: dict, grid, what: str) -> None:
        """Every device's shards must be what this program expects: processes
        that compiled different programs (other shapes) meet here first. The
        error names both processes."""
        expected = [(tuple(shape), getattr(t, "dtype", None)) for shape, t in
                    zip(self.argument_shard_shapes(0), self.program.input_types)]
        here = grid.describe(self._process_id(next(d for d in shards if grid.is_local(self._process_id(d)))))
        for device, values in shards.items():
            got = [(tuple(np.shape(v)), np.asarray(v).dtype) for v in values]
            for i, ((shape, dtype), (got_shape, got_dtype)) in enumerate(zip(expected, got)):
                if dtype is not None and (shape != got_shape or np.dtype(dtype) != got_dtype):
                    raise InvalidArgument(
                        f"{what}: argument {i}: {grid.describe(self._process_id(device))} brought "
                        f"{got_dtype}{list(got_shape)} but {here} runs a program that takes "
                        f"{np.dtype(dtype)}{list(shape)}: the processes do not run the same program")

    def _process_id(self, device: int) -> tuple[int, int]:
        return divmod(device, self.num_partitions)

    def run_on_every_device(self, per_device_arguments: list, placement=None) -> dict:
        """GSPMD manual regions, or unreduced values: the whole program on
        every device (of this process), one thread each (see `manual.py`),
        on that device's view of the global arguments; {device: its results}."""
        program = self.per_device_program
        views = {}                       # arguments differ only where some are unreduced
        run = PartitionedRun(self.meshes, self.num_replicas, self.num_partitions, per_device=True)

        function = observer.current.function(program)    # instrumented under jax.profiler.trace

        def job(device: int):
            key = self.argument_view_key(device)
            if key not in views:
                views[key] = program.check_arguments(
                    self.assemble_arguments(per_device_arguments, view_of=device))
            arguments = views[key]
            return lambda: run_with(run, lambda: function.run(list(arguments)))
        return run_on_grid(None, self.num_replicas, self.num_partitions,
                           [job(d) for d in self.devices], placement)

    def argument_view_key(self, device: int) -> tuple:
        """Which devices see the same global arguments: those holding the same
        partial sums of every unreduced argument."""
        return tuple(layout.partial_of[device] for layout in self.argument_layouts
                     if layout.partial_of is not None)

    def assemble_arguments(self, per_device_arguments, view_of: int | None = None) -> list[np.ndarray]:
        """Each global argument, from the shards of the devices that hold its
        tiles (for an unreduced argument, `view_of`'s partial sum)."""
        expected = len(self.program.input_types)
        for device, shards in enumerate(per_device_arguments):
            if len(shards) != expected:
                raise InvalidArgument(f"@{self.program.entry} takes {expected} argument(s); "
                                      f"device {device} passed {len(shards)}")
        arguments = []
        for i, (layout, ttype) in enumerate(zip(self.argument_layouts, self.program.input_types)):
            shards = {d: per_device_arguments[d][i] for d in self.devices}
            if not hasattr(ttype, "dtype"):      # tokens: any device's will do
                arguments.append(shards[0])
                continue
            arguments.append(layout.assemble(shards, _shape(ttype), ttype.dtype,
                                             f"argument {i} of @{self.program.entry}",
                                             view_of=view_of))
        return arguments

    def _layout(self, attrs: dict, ttype) -> Layout:
        """The layout a value's `sdy.sharding` / `mhlo.sharding` attribute
        gives (replicated without one)."""
        rank = len(_shape(ttype))
        if "sdy.sharding" in attrs:
            return self._sdy_layout(attrs["sdy.sharding"], rank)
        if "mhlo.sharding" in attrs:
            return parse_hlo_sharding(attrs["mhlo.sharding"], rank, self.devices)
        return replicated(rank, self.devices)

    def _sdy_layout(self, text: str, rank: int) -> Layout:
        """A Shardy sharding's layout; a maximal sharding (a mesh without axes,
        `@maximal_mesh_0 = <[], device_ids=[0]>`) puts the whole value on one
        device, and the reference gives every device the same whole value."""
        sharding = parse_tensor_sharding(text)
        if not sharding.mesh(self.meshes).axes:
            return replicated(rank, self.devices)
        return sharding.layout(self.meshes)

    def _chosen_result_layout(self, value, shape: tuple[int, ...]) -> Layout:
        """The layout of a result JAX left to the compiler: the one it
        inherits (`_inherited_layout`), replicated without one. A split its
        tiles do not divide is not kept, as XLA leaves it: a Shardy program
        (sdy meshes) keeps the other dimensions' splits (`split_evenly`), a
        GSPMD one replicates the whole result."""
        inherited = self._inherited_layout(value)
        if inherited is None:
            return replicated(len(shape), self.devices)
        evenly = inherited.split_evenly(shape)
        if evenly is not inherited and not self.meshes:
            return replicated(len(shape), self.devices)
        return evenly

    def _inherited_layout(self, value) -> Layout | None:
        """The layout of a result JAX left to the compiler (no sharding attribute).

        XLA would choose one by sharding propagation; the reference follows
        the value back through element-wise ops of the same shape, through
        slices and reverses (which keep their operand's splits; a dynamic slice keeps
        those of the dimensions it does not cut; a gather those it passes
        through whole), reshapes (`_reshape_layout`), through
        transposes (permuting the sharding's dimensions), into what a loop's
        body or a conditional's branches return (and a loop's operand), through
        custom calls that only place or lay out their operand, and through
        `func.call`s (into the callee's `func.return`, and from a callee's
        argument back to the call's operand) to an entry argument, a sharding
        constraint or a manual computation's result and takes that sharding
        (so `jit(lambda x: 2 * x)` keeps x's sharding and shard_map's outputs
        get their out_specs, also when JAX outlines the shard_map into a
        private function, as it does under `jax.grad`). Any other result is
        replicated. Values never depend on this choice.

        The walk is depth-first, operands in order, and the first source found
        wins. Each (value, calls) is visited once per partitioner and its
        answer kept (`_inherited`), so the walk is linear in the program's size
        even where many ops share operands (a chain of n element-wise ops that
        each read the previous value twice has 2^n paths); it runs on its own
        stack, so chains deeper than Python's recursion limit are fine.

        A value in a sharding group (`sdy.sharding_group`, JAX's
        `shard_alike`) that finds no source of its own takes the first one
        the other members of its group find, as XLA gives a group one
        sharding.
        """
        return self._inherited_from((value.maybe_downcast(), ()))

    def _inherited_from(self, root: tuple) -> Layout | None:
        """`_inherited_layout` of the (value, calls) pair `root`."""
        done = self._inherited
        stack: list[list] = []          # frames [key, successors, index of the next one]
        active: set = set()             # keys on the stack (a cycle leads nowhere)

        def enter(key) -> None:
            self.layout_visits += 1
            found, successors = self._layout_source(*key)
            if found is not None or not successors:
                done[key] = found
            else:
                stack.append([key, successors, 0])
                active.add(key)

        def finish(key, layout) -> None:
            done[key] = layout
            stack.pop()
            active.discard(key)

        if root not in done:
            enter(root)
        while stack:
            frame = stack[-1]
            key, successors, index = frame
            while index < len(successors) and (
                    successors[index] in active
                    or (successors[index] in done and done[successors[index]] is None)):
                index += 1
            frame[2] = index
            if index == len(successors):
                finish(key, None)
            elif successors[index] in done:
                finish(key, done[successors[index]])
            else:
                enter(successors[index])
        return done[root]

    def _layout_source(self, value, calls: tuple) -> tuple[Layout | None, list]:
        """One step of `_inherited_layout`: the layout `value` itself carries, or
        the (value, calls) pairs to look at next, in order: its own sources,
        then the other members of its sharding group. `calls` holds the
        `func.call` ops the walk went through, innermost last."""
        found, successors = self._own_layout_source(value, calls)
        if found is None:
            successors = successors + [(other, calls) for other in self._groups.get(value, ())]
        return found, successors

    def _own_layout_source(self, value, calls: tuple) -> tuple[Layout | None, list]:
        """`_layout_source` from the ops that make `value`."""
        from jaxlib.mlir import ir

        if isinstance(value, ir.BlockArgument):   # a function's argument: its caller's operand
            block_op = value.owner.owner
            block_op = getattr(block_op, "operation", block_op)
            if block_op.name == "stablehlo.while":    # a loop-carried value: the loop's operand
                return None, [(block_op.operands[value.arg_number].maybe_downcast(), calls)]
            if block_op.name != "func.func":
                return None, []         # a region's argument (a shard_map body's is local): no source
            if not calls:
                return self.argument_layouts[value.arg_number], []
            return None, [(calls[-1].operands[value.arg_number].maybe_downcast(), calls[:-1])]
        op = value.owner
        op = getattr(op, "operation", op)
        if op.name in ELEMENTWISE:
            shape = _shape_of(value)
            return None, [(operand.maybe_downcast(), calls) for operand in op.operands
                          if _shape_of(operand) == shape]
        if op.name in _REGION_RESULTS:        # what the body (each branch) returns, then a loop's operand
            index = value.result_number
            returned = [region.blocks[0].operations[len(region.blocks[0].operations) - 1].operands[index]
                        for region in op.regions[_REGION_RESULTS[op.name]:]]
            operands = [op.operands[index]] if op.name == "stablehlo.while" else []
            return None, [(v.maybe_downcast(), calls) for v in returned + operands]
        if custom_call_target(op) in SAME_VALUE_CALLS or op.name in _SPLITS_KEPT:
            return None, [(op.operands[0].maybe_downcast(), calls)]
        if op.name == "stablehlo.transpose":
            found = self._inherited_from((op.operands[0].maybe_downcast(), calls))
            permutation = tuple(convert_attribute(op.attributes["permutation"]))
            return (None if found is None else found.transposed(permutation)), []
        if op.name == "stablehlo.dot_general":
            return self._dot_general_layout(op, calls), []
        attrs = _attribute_texts(op)
        if op.name == "sdy.manual_computation":
            return self._manual_result_layout(op, value, calls, attrs["out_shardings"]), []
        if op.name in ("sdy.sharding_constraint", "sdy.reshard"):
            return self._constrained_layout(attrs["sharding"], op.operands[0].maybe_downcast(), value, calls), []
        if op.name == "stablehlo.broadcast_in_dim":
            return self._broadcast_layout(op, value, calls), []
        if op.name == "stablehlo.reshape":
            return self._reshape_layout(op, value, calls), []
        if op.name == "stablehlo.gather":
            return self._gather_layout(op, value, calls), []
        if op.name == "stablehlo.dynamic_slice":      # splits kept where the size is kept
            found = self._inherited_from((op.operands[0].maybe_downcast(), calls))
            kept = [a == b for a, b in zip(_shape_of(op.operands[0]), _shape_of(value))]
            return (None if found is None else gathered(
                [(found if keep else None, d) for d, keep in enumerate(kept)], self.devices)), []
        if op.name == "stablehlo.concatenate":
            found = self._inherited_from((op.operands[0].maybe_downcast(), calls))
            axis = int(convert_attribute(op.attributes["dimension"]))
            return (None if found is None else gathered(
                [(None if d == axis else found, d) for d in range(len(_shape_of(value)))],
                self.devices)), []
        if custom_call_target(op) == MANUAL_CALL:      # gspmd.py, custom_partitioning.py
            known = (custom_partitioning.RESULT_SHARDINGS_ATTR
                     if custom_partitioning.RESULT_SHARDINGS_ATTR in op.attributes else OUT_SHARDINGS_ATTR)
            text = list(op.attributes[known])[value.result_number]
            return parse_hlo_sharding(attribute_text(text), len(_shape_of(value)), self.devices), []
        open_dims = _gspmd_open_dims(op, attrs, len(_shape_of(value)))
        if open_dims is not None:
            rank = len(_shape_of(value))
            pinned = parse_hlo_sharding(attrs["mhlo.sharding"], rank, self.devices)
            found = self._inherited_from((op.operands[0].maybe_downcast(), calls))
            if found is None:
                return (None if attrs["mhlo.sharding"] == "{replicated}" else pinned), []
            return gathered([(found if is_open and pinned.tile_counts[d] == 1 else pinned, d)
                             for d, is_open in enumerate(open_dims)], self.devices) or pinned, []
        if custom_call_target(op) == "Sharding" and GROUP_SHARDING.search(attrs.get("mhlo.sharding", "")):
            return None, [(op.operands[0].maybe_downcast(), calls)]      # a group's member only
        if custom_call_target(op) in ("Sharding", "SPMDShardToFullShape") \
                and "mhlo.sharding" in attrs:
            return parse_hlo_sharding(attrs["mhlo.sharding"], len(_shape_of(value)), self.devices), []
        if op.name == "func.call":
            returned = _returned_values(self._callee(attrs["callee"]))[value.result_number]
            return None, [(returned.maybe_downcast(), calls + (op,))]
        return None, []

    def _constrained_layout(self, text: str, operand, value, calls: tuple) -> Layout | None:
        """A Shardy constraint's layout: the splits it pins, and along each dimension it
        leaves open and unsplit (`{?}`) the split propagation gives its operand, as XLA's
        propagation fills it: unless that split is over an axis the constraint says stays
        whole (`replicated={"y"}`), or over devices a pinned dimension already splits over
        (`gathered`). A constraint that pins nothing and finds nothing is no source."""
        rank = len(_shape_of(value))
        open_dims = _open_and_unsplit(text)
        pinned = self._sdy_layout(text, rank)
        if not any(open_dims):
            return pinned
        found = self._inherited_from((operand, calls))
        if found is None:
            return None if _open_unsplit_dims(text) is not None else pinned
        found = self._whole_along_replicated_axes(found, text)
        return gathered([(found if is_open else pinned, d) for d, is_open in enumerate(open_dims)],
                        self.devices) or pinned

    def _whole_along_replicated_axes(self, layout: Layout, text: str) -> Layout:
        """`layout` with every dimension it splits over an axis that Shardy sharding `text`
        names replicated (`replicated={"y"}`) left whole: two devices that differ only
        along those axes must hold the same tile."""
        match = re.search(r"replicated=\{([^}]*)\}", text)
        names = set(re.findall(r'"([^"]+)"', match.group(1))) if match else set()
        if not names:
            return layout
        coordinates = parse_tensor_sharding(text).mesh(self.meshes).coordinates()

        def others(device):
            return tuple(v for axis, v in coordinates[device].items() if axis not in names)
        split = [any(layout.tile_of[a][d] != layout.tile_of[b][d]
                     for a in coordinates for b in coordinates if others(a) == others(b))
                 for d in range(len(layout.tile_counts))]
        if not any(split):
            return layout
        return gathered([(None if bad else layout, d) for d, bad in enumerate(split)], self.devices) or layout

    def _manual_result_layout(self, op, value, calls: tuple, out_shardings: str) -> Layout:
        """A shard_map result's layout: its out_sharding's, and along the
        dimensions that leaves open and unsplit (`{?}`, a shard_map manual
        over some axes only) the split the body's own constraints give the
        returned value over the free axes, as XLA's propagation fills them."""
        text = sharding_texts_per_value(out_shardings)[value.result_number]
        pinned = parse_tensor_sharding(text).layout(self.meshes)
        open_dims = _open_and_unsplit(text)
        if not any(open_dims):
            return pinned
        returned = op.regions[0].blocks[0].operations[-1].operands[value.result_number]
        found = self._inherited_from((returned.maybe_downcast(), calls))
        if found is None:
            return pinned
        return gathered([(found if is_open else pinned, d) for d, is_open in enumerate(open_dims)],
                        self.devices) or pinned

    def _broadcast_layout(self, op, value, calls: tuple) -> Layout | None:
        """A broadcast's result split as its operand along the dimensions it
        maps (`broadcast_dimensions`), whole along the new or stretched ones."""
        found = self._inherited_from((op.operands[0].maybe_downcast(), calls))
        if found is None:
            return None
        operand_shape, shape = _shape_of(op.operands[0]), _shape_of(value)
        source_of = {int(r): d for d, r in enumerate(convert_attribute(op.attributes["broadcast_dimensions"]))
                     if operand_shape[d] == shape[int(r)]}
        return gathered([(found, source_of[r]) if r in source_of else (None, 0) for r in range(len(shape))],
                        self.devices)

    def _reshape_layout(self, op, value, calls: tuple) -> Layout | None:
        """A reshape's result split as XLA's propagation splits it: in each
        group of dimensions the reshape merges or splits (`reshape_groups`),
        the major operand dimension's split goes to the major result
        dimension, where its tiles divide it; the group's other splits are
        dropped, and size-1 dimensions are never split."""
        found = self._inherited_from((op.operands[0].maybe_downcast(), calls))
        if found is None:
            return None
        operand_shape, shape = _shape_of(op.operands[0]), _shape_of(value)
        sources: list = [(None, 0)] * len(shape)
        for operand_dims, result_dims in reshape_groups(operand_shape, shape):
            major, target = operand_dims[0], result_dims[0]
            if shape[target] % found.tile_counts[major] == 0:
                sources[target] = (found, major)
        return gathered(sources, self.devices)

    def _gather_layout(self, op, value, calls: tuple) -> Layout | None:
        """A gather's result split as its operand along the dimensions it
        passes through whole (an offset dimension whose slice is the whole
        operand dimension, as `x[i]` takes every column of a row), as XLA's
        propagation splits it; whole along the others."""
        found = self._inherited_from((op.operands[0].maybe_downcast(), calls))
        if found is None:
            return None
        numbers = convert_attribute(op.attributes["dimension_numbers"])
        sizes = tuple(convert_attribute(op.attributes["slice_sizes"]))
        operand_shape = _shape_of(op.operands[0])
        windowed = [d for d in range(len(operand_shape))
                    if d not in numbers.collapsed_slice_dims and d not in numbers.operand_batching_dims]
        sources: list = [(None, 0)] * len(_shape_of(value))
        for d, out in zip(windowed, numbers.offset_dims):
            if sizes[d] == operand_shape[d]:
                sources[out] = (found, d)
        return gathered(sources, self.devices)

    def _dot_general_layout(self, op, calls: tuple) -> Layout | None:
        """A product's result split as its operands are along the dimensions it
        keeps (batch and lhs free dimensions from lhs, rhs free ones from rhs),
        as XLA's propagation splits it; where both operands split over the same
        devices, the rhs's split gives way (an lhs-only layout), then none."""
        numbers = convert_attribute(op.attributes["dot_dimension_numbers"])
        lhs, rhs = (self._inherited_from((v.maybe_downcast(), calls)) for v in op.operands[:2])
        if lhs is None and rhs is None:
            return None
        lhs_rank, rhs_rank = (len(_shape_of(v)) for v in op.operands[:2])
        lhs_free = [d for d in range(lhs_rank) if d not in numbers.lhs_batching_dimensions
                    and d not in numbers.lhs_contracting_dimensions]
        rhs_free = [d for d in range(rhs_rank) if d not in numbers.rhs_batching_dimensions
                    and d not in numbers.rhs_contracting_dimensions]
        lhs_part = [(lhs, d) for d in (*numbers.lhs_batching_dimensions, *lhs_free)]
        rhs_part = [(rhs, d) for d in rhs_free]
        return (gathered(lhs_part + rhs_part, self.devices)
                or gathered(lhs_part + [(None, 0)] * len(rhs_part), self.devices))

    def _kept_per_device(self, value, depth: int = 0, calls: tuple = ()) -> bool:
        """Whether a returned value is a manual computation's result that is
        replicated over some of its manual axes, such as pmap's `out_axes=None`
        or a shard_map's `out_specs=P()` with `check_vma=False`.

        XLA inserts no communication for such a result: each device keeps the
        value its own body computed, which need not be the same on every
        device (jax.pmap's out_axes=None returns each device's own value).
        The global run keeps one value for all devices, so such a program runs
        on every device (`run_on_every_device`), where each device assembles
        its own view (`Layout.assemble(view_of=...)`). Followed through
        `func.call`s, as `_inherited_layout` does.
        """
        from jaxlib.mlir import ir

        value = value.maybe_downcast()
        if depth > 100:
            return False
        if isinstance(value, ir.BlockArgument):
            return bool(calls) and self._kept_per_device(
                calls[-1].operands[value.arg_number], depth + 1, calls[:-1])
        op = value.owner
        op = getattr(op, "operation", op)
        if op.name == "func.call":
            callee = self._callee(attribute_text(op.attributes["callee"]))
            return self._kept_per_device(_returned_values(callee)[value.result_number],
                                         depth + 1, calls + (op,))
        if custom_call_target(op) == "SPMDShardToFullShape":
            return self._gspmd_kept_per_device(op)
        if op.name != "sdy.manual_computation":
            return False
        manual = parse_manual_axes(attribute_text(op.attributes["manual_axes"]))
        sharding = parse_sharding_per_value(attribute_text(op.attributes["out_shardings"]))[
            value.result_number]
        used = {axis.name for axes in sharding.dims for axis in axes} | \
            {axis.name for axis in sharding.unreduced}
        return bool(manual - used)

    def _gspmd_kept_per_device(self, op) -> bool:
        """`_kept_per_device` in GSPMD's spelling: an `@SPMDShardToFullShape`
        leaving a fully manual region (its operand's `@Sharding` is `{manual}`)
        whose sharding gives some tile to several devices (`{replicated}`)."""
        operand = op.operands[0].owner
        operand = getattr(operand, "operation", operand)
        if "mhlo.sharding" not in op.attributes or custom_call_target(operand) != "Sharding":
            return False
        if attribute_text(operand.attributes["mhlo.sharding"]) != "{manual}":
            return False
        layout = parse_hlo_sharding(attribute_text(op.attributes["mhlo.sharding"]),
                                    len(_shape_of(op.results[0])), self.devices)
        return len(set(layout.tile_of.values())) < len(layout.tile_of)

    def _callee(self, symbol: str):
        """The `func.func` a `func.call`'s `callee` attribute (`@name`) names."""
        return _entry_function(self.program.mlir_module(), symbol.lstrip("@").strip('"'))


def _with_reductions_marked(program):
    """`program` with its unreduced values' reduction points marked
    (`unreduced.py`), loaded to run on every device."""
    from jaxlib.mlir import ir
    from pjrt_ref.interpreter.program import load

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(program.text)
        mark_reductions(module, program.entry)
        return load(str(module), program.entry)


def _run_program(program, arguments: list) -> list:
    """`program` on the global arguments; under jax.profiler.trace, its instrumented plan
    so each op leaves a slice (interpreter/observer.py)."""
    return observer.current.function(program).run(program.check_arguments(arguments))


# --------------------------------------------------------------- reading the module
# GSPMD's form of a sharding group: `@Sharding` with mhlo.sharding "{shard_as N}".


def _sharding_groups(module) -> dict:
    """Each value in a sharding group -> the group's other values in the same
    function: Shardy's `sdy.sharding_group` operands, GSPMD's `@Sharding`
    results whose sharding is "{shard_as N}"."""
    groups: dict = {}
    for func in module.body.operations:
        members: dict = {}
        for op in func.regions[0].blocks[0].operations if func.regions else ():
            if op.operation.name == "sdy.sharding_group":
                group = int(convert_attribute(op.attributes["group_id"]))
                members.setdefault(group, []).append(op.operands[0].maybe_downcast())
            elif custom_call_target(op) == "Sharding" and "mhlo.sharding" in op.attributes:
                match = GROUP_SHARDING.search(attribute_text(op.attributes["mhlo.sharding"]))
                if match:
                    members.setdefault(("gspmd", int(match.group(1))), []).append(op.results[0])
        for values in members.values():
            for value in values:
                groups[value] = [other for other in values if other != value]
    return groups


def _read_meshes(module) -> dict[str, Mesh]:
    """Every `sdy.mesh @name = <...>` of the module, by name."""
    meshes = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "sdy.mesh":
            name = str(op.attributes["sym_name"]).strip('"')
            meshes[name] = parse_mesh(str(op.attributes["mesh"]))
    return meshes


def _entry_function(module, entry: str):
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and str(op.attributes["sym_name"]).strip('"') == entry:
            return op
    raise InvalidArgument(f"no function @{entry} in the program")


def _dimension_groups(text: str) -> list[str]:
    """The text inside each dimension's braces of a Shardy sharding
    (`<@mesh, [{"x"}, {?}]>` -> ['"x"', '?'])."""
    body = text[text.index("["):] if "[" in text else ""
    return re.findall(r"\{([^}]*)\}", body[:body.find("]") + 1] if "]" in body else body)


def _open_and_unsplit(text: str) -> list[bool]:
    """For each dimension of a Shardy sharding, whether it is open (`{?}`)
    and split over no axis."""
    return ["?" in g and not g.replace("?", "").strip() for g in _dimension_groups(text)]


def _open_unsplit_dims(text: str) -> list[bool] | None:
    """For a Shardy sharding that splits no dimension and leaves some open
    (`<@empty_mesh, [{?}, {?}, {}]>`: JAX's constraint that only says "keep
    the last dimension whole"), whether each dimension is open; None for a
    sharding that pins something (propagation gives way to it)."""
    groups = _dimension_groups(text)
    if not groups or any(g.replace("?", "").strip() for g in groups) or not any("?" in g for g in groups):
        return None
    return ["?" in g for g in groups]


def _gspmd_open_dims(op, attrs: dict, rank: int) -> list[bool] | None:
    """The open dimensions of GSPMD's constraint: a `@Sharding` call whose
    `backend_config = "unspecified_dims=[0,1]"` leaves those dimensions open
    (for propagation to fill where its sharding splits them over no device)
    and pins the others as its `mhlo.sharding` says; None for any other op."""
    text = attrs.get("mhlo.sharding")
    if custom_call_target(op) != "Sharding" or text is None or GROUP_SHARDING.search(text):
        return None     # (a sharding group's member is not a constraint)
    match = re.search(r"unspecified_dims=\[([\d,\s]*)\]", attrs.get("backend_config", ""))
    if match is None:
        return None
    unspecified = {int(d) for d in match.group(1).split(",") if d.strip()}
    return [d in unspecified for d in range(rank)]


def _attr_dicts(func, name: str, count: int) -> list[dict[str, str]]:
    """The func's per-argument (or per-result) attributes as {name: text}."""
    if name not in func.attributes:
        return [{} for _ in range(count)]
    dicts = []
    for entry in func.attributes[name]:
        from jaxlib.mlir import ir
        entry = ir.DictAttr(entry)
        dicts.append({entry[i].name: attribute_text(entry[i].attr) for i in range(len(entry))})
    return dicts


def _attribute_texts(op) -> dict[str, str]:
    """`op`'s attributes as text, by name. One jaxlib cannot hand to Python (a complex
    splat constant such as `dense<(0x7FC00000,0x7FC00000)> : tensor<complex<f32>>`:
    "Can't cast unknown element type") is left out: those are values, which sharding
    propagation never reads."""
    texts = {}
    for name in op.attributes:
        try:
            texts[name] = attribute_text(op.attributes[name])
        except TypeError:       # (by name: a failing look-up by position aborts the process)
            continue
    return texts


def _passes_value_on(op) -> bool:
    """A custom call that only places, lays out or groups its operand (GSPMD's
    `shard_as` @Sharding marks a sharding group's member)."""
    target = custom_call_target(op)
    return target in SAME_VALUE_CALLS or (
        target == "Sharding" and "mhlo.sharding" in op.attributes
        and GROUP_SHARDING.search(attribute_text(op.attributes["mhlo.sharding"])) is not None)


def _annotated(attrs: dict) -> bool:
    return "sdy.sharding" in attrs or "mhlo.sharding" in attrs


def _returned_values(func) -> list:
    """The operands of the entry function's `func.return`."""
    block = func.regions[0].blocks[0]
    return list(block.operations[len(block.operations) - 1].operands)


# Ops whose result XLA's propagation splits as their first operand, dimension
# for dimension, whatever the sizes (a slice of a split dimension stays split).
_SPLITS_KEPT = frozenset({"stablehlo.slice", "stablehlo.reverse"})


def _shape_of(value) -> tuple:
    from jaxlib.mlir import ir
    vtype = value.type.maybe_downcast() if hasattr(value.type, "maybe_downcast") else value.type
    return tuple(vtype.shape) if isinstance(vtype, ir.ShapedType) else ()


# Ops whose result element i depends only on the operands' element i.
# Ops whose results are what their regions return: the index of the first such
# region (a while's body follows its condition; each branch of a case or an if).
_REGION_RESULTS = {"stablehlo.while": 1, "stablehlo.case": 0, "stablehlo.if": 0}


# ------------------------------------------------------------- optimized program
# Ops jaxlib's MLIR-to-HLO conversion refuses ("failed to convert to MHLO"):
# the async collectives JAX's `parallel.psum_start(...).done()` lowers to.
_UNCONVERTIBLE = re.compile(r"\bstablehlo\.async_(?:start|done)\b")


def _converts_to_hlo(text: str) -> bool:
    """Whether XLA's MLIR-to-HLO conversion (which the C API client runs on
    the optimized program) can take the program as it is: Shardy ops such
    as `sdy.manual_computation` need XLA's own export passes first, and
    some ops it cannot take at all (`_UNCONVERTIBLE`)."""
    return (re.search(r"^\s*(%[^=]*=\s*)?\"?sdy\.(?!mesh\b)", text, re.M) is None
            and _UNCONVERTIBLE.search(text) is None)


def _with_module_shardings(text: str, output: str, parameters: list[str]) -> str:
    """`text` with `mhlo.spmd_output_sharding` / `mhlo.spmd_parameters_shardings` set."""
    from jaxlib.mlir import ir

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        attrs = module.operation.attributes
        attrs["mhlo.spmd_output_sharding"] = ir.StringAttr.get(output)
        attrs["mhlo.spmd_parameters_shardings"] = ir.ArrayAttr.get(
            [ir.StringAttr.get(t) for t in parameters])
        return str(module)


def _signature_stub(program, num_partitions: int, output: str, parameters: list[str]) -> str:
    """A module with the program's signature and shardings whose body only
    makes zeros: for a program XLA's converter cannot read (see
    `_converts_to_hlo`), the shardings are what the client needs; the
    module attribute `pjrt_ref.note` says the body is not the program."""
    func = _entry_function(program.mlir_module(), program.entry)
    ftype = func.attributes["function_type"].value
    inputs = [str(t) for t in ftype.inputs]
    results = [str(t) for t in ftype.results]
    args = ", ".join(f"%arg{i}: {t} {{mhlo.sharding = {_quote(s)}}}"
                     for i, (t, s) in enumerate(zip(inputs, parameters)))
    body, names = [], []
    for i, t in enumerate(results):
        body.append(f"    %r{i} = {_zeros(t)}")
        names.append(f"%r{i}")
    result_list = ", ".join(f"{t}" for t in results)
    note = ("signature and shardings only: pjrt-ref runs the global program "
            "(pjrt_ref/spmd/partitioner.py)")
    return (f"module @{_module_name(program.text)} attributes {{mhlo.num_partitions = "
            f"{num_partitions} : i32, mhlo.num_replicas = 1 : i32, "
            f"mhlo.spmd_output_sharding = {_quote(output)}, mhlo.spmd_parameters_shardings = "
            f"[{', '.join(_quote(p) for p in parameters)}], pjrt_ref.note = {_quote(note)}}} {{\n"
            f"  func.func public @main({args}) -> ({result_list}) {{\n" + "\n".join(body) +
            f"\n    return {', '.join(names)} : {result_list}\n  }}\n}}\n")


def _zeros(type_text: str) -> str:
    if "token" in type_text:
        return "stablehlo.after_all : !stablehlo.token"
    element = type_text.rsplit("x", 1)[-1].rstrip(">") if "x" in type_text else type_text[7:-1]
    if element == "i1":
        literal = "false"
    elif element.startswith("complex"):
        literal = "(0.0, 0.0)"
    elif element.startswith(("f", "bf")):
        literal = "0.0"
    else:
        literal = "0"
    return f"stablehlo.constant dense<{literal}> : {type_text}"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _module_name(text: str) -> str:
    match = re.match(r"\s*module\s+@([\w.$-]+)", text)
    return match.group(1) if match else "main"


def _shape(ttype) -> tuple[int, ...]:
    return tuple(int(d) for d in getattr(ttype, "shape", ()))
