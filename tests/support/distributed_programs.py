"""One process of a multi-process JAX job: the programs of tests/distributed/test_distributed.py.

Run as a script, once per process (tests/support/distributed_launch.py starts them):

    python tests/support/distributed_programs.py --backend pjrt_ref --process-id 0 \
        --num-processes 2 --port 12345 --devices 2 --out DIR [--programs pmap,jit]

Every process calls `jax.distributed.initialize` with explicit arguments,
runs the same programs on its own devices and saves what its devices hold
of each result into DIR/<backend>_<process id>.npz: an array stacked over
its addressable devices (in device order), so that joining the processes'
arrays gives the single-process run's. `--backend cpu` is the oracle: XLA
CPU's own multi-process run, its collectives over Gloo bound to loopback.

Inputs are global arrays every process makes from the same seed; each
takes its own devices' part.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# The repository root: the test helpers are imported as a package (tests.support)
# by a process started as a script, whose sys.path begins at tests/support/.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["pjrt_ref", "cpu"], required=True)
    parser.add_argument("--process-id", type=int, default=None,
                        help="default: detect (mpiexec: jax's mpi4py cluster detection)")
    parser.add_argument("--num-processes", type=int, default=None)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--devices", type=int, default=1, help="devices per process")
    parser.add_argument("--mesh-rows", type=int, default=None,
                        help="rows of the ('procs', 'local') mesh (default: the process count); "
                             "a single process given P rows runs the P-process job's programs")
    parser.add_argument("--out", required=True)
    parser.add_argument("--programs", default="all", help="comma-separated names, or all")
    parser.add_argument("--fault", choices=["die", "late", "mismatch"], default=None,
                        help="run the fault program with this fault (tests of failures)")
    return parser.parse_args(argv)


def start_jax(options: argparse.Namespace):
    """jax with `options.devices` devices of `options.backend` in this process, distributed."""
    # pjrt_ref first (the default backend); cpu beside it is where JAX puts host
    # callbacks' operands (the issue's own setting: JAX_PLATFORMS=pjrt_ref,cpu).
    os.environ["JAX_PLATFORMS"] = "pjrt_ref,cpu" if options.backend == "pjrt_ref" else "cpu"
    os.environ["PJRT_REF_NUM_DEVICES"] = str(options.devices)
    import jax

    if options.backend == "cpu":
        jax.config.update("jax_num_cpu_devices", options.devices)
    if options.process_id is None:       # launched by mpiexec
        jax.distributed.initialize(cluster_detection_method="mpi4py")
    else:
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{options.port}",
                                   num_processes=options.num_processes,
                                   process_id=options.process_id)
    use_loopback_gloo(jax)          # the oracle's backend, and pjrt_ref's neighbour
    return jax


def use_loopback_gloo(jax) -> None:
    """XLA CPU's client with Gloo collectives on the loopback interface (JAX's
    default lets Gloo pick the host's address)."""
    from jax._src import distributed, xla_bridge
    from jax._src.lib import _jax

    def factory():
        gloo = _jax.make_gloo_tcp_collectives(distributed_client=distributed.global_state.client,
                                              interface="lo")
        return xla_bridge.make_cpu_client(collectives=gloo)

    xla_bridge.register_backend_factory("cpu", factory, priority=0)


def local_value(array) -> np.ndarray:
    """What this process's devices hold of `array`, stacked in device order."""
    shards = sorted(array.addressable_shards, key=lambda shard: shard.device.id)
    return np.stack([np.asarray(shard.data) for shard in shards])


def global_input(shape: tuple, seed: int, dtype=np.float32) -> np.ndarray:
    """The same array in every process."""
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# --------------------------------------------------------------------- pmap
def pmap_programs(jax, process_id: int):
    """Each collective pmap emits, over every device of the job."""
    from jax import lax

    n, local = jax.device_count(), jax.local_device_count()
    x = global_input((n, n * 2, 3), seed=1)[process_id * local:(process_id + 1) * local]
    shift = [(i, (i + 1) % n) for i in range(n)]
    programs = {
        "psum": lambda v: lax.psum(v, "i"),
        "pmean": lambda v: lax.pmean(v, "i"),
        "pmax": lambda v: lax.pmax(v, "i"),
        "all_gather": lambda v: lax.all_gather(v, "i"),
        "ppermute": lambda v: lax.ppermute(v, "i", shift),
        "psum_scatter": lambda v: lax.psum_scatter(v, "i", tiled=True),
        "all_to_all": lambda v: lax.all_to_all(v, "i", 0, 0, tiled=True),
        "axis_index": lambda v: v * lax.axis_index("i"),
    }
    return {f"pmap/{name}": local_value(jax.pmap(f, axis_name="i")(x)) for name, f in programs.items()}


# ---------------------------------------------------------------------- jit
def global_mesh(jax, rows: int):
    """A 2-D mesh ("procs", "local") of every device: `rows` rows (one per process)."""
    from jax.sharding import Mesh

    return Mesh(np.array(jax.devices()).reshape(rows, -1), ("procs", "local"))


def jit_programs(jax, rows: int):
    """jax.jit over global NamedShardings; inputs made both ways JAX offers."""
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = global_mesh(jax, rows)
    rows = NamedSharding(mesh, P(("procs", "local")))
    n = jax.device_count()
    x_global = global_input((n * 4, 6), seed=2)
    w = jnp.asarray(global_input((6, 5), seed=3))
    x = from_process_local_data(jax, rows, x_global)
    y = from_single_device_arrays(jax, rows, x_global)

    results = {
        "jit/matmul": jax.jit(lambda a: jnp.tanh(a @ w), out_shardings=rows)(x),
        "jit/column_sums": jax.jit(lambda a: a.sum(axis=0))(x),
        "jit/mixed": jax.jit(lambda a, b: a * b.mean() - jnp.roll(b, 1, axis=0),
                             out_shardings=NamedSharding(mesh, P(None, "local")))(x, y),
        "jit/transpose": jax.jit(lambda a: a.T @ a, out_shardings=NamedSharding(mesh, P()))(y),
    }
    return {name: local_value(value) for name, value in results.items()}


def from_process_local_data(jax, sharding, global_array: np.ndarray):
    """`jax.make_array_from_process_local_data`: this process's rows of `global_array`."""
    process_id, count = jax.process_index(), jax.process_count()
    rows = len(global_array) // count
    return jax.make_array_from_process_local_data(
        sharding, global_array[process_id * rows:(process_id + 1) * rows], global_array.shape)


def from_single_device_arrays(jax, sharding, global_array: np.ndarray):
    """`jax.make_array_from_single_device_arrays`: one array per addressable device."""
    index_of = sharding.addressable_devices_indices_map(global_array.shape)
    arrays = [jax.device_put(global_array[index], device) for device, index in index_of.items()]
    return jax.make_array_from_single_device_arrays(global_array.shape, sharding, arrays)


# ---------------------------------------------------------------- shard_map
def shard_map_programs(jax, rows: int):
    """shard_map bodies with collectives over every device, over the processes
    only, and over each process's devices only."""
    from jax import lax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = global_mesh(jax, rows)
    both = ("procs", "local")
    n = jax.device_count()
    x = from_process_local_data(jax, NamedSharding(mesh, P(both)), global_input((n * n, 4), seed=4))
    shift = [(i, (i + 1) % rows) for i in range(rows)]
    bodies = {
        "psum": (lambda v: lax.psum(v, both), P()),
        "pmean_procs": (lambda v: lax.pmean(v, "procs"), P("local")),
        "all_gather": (lambda v: lax.all_gather(v, both, tiled=True), P()),
        "ppermute_procs": (lambda v: lax.ppermute(v, "procs", shift), P(both)),
        "psum_scatter": (lambda v: lax.psum_scatter(v, both, tiled=True), P(both)),
        "all_to_all": (lambda v: lax.all_to_all(v, both, 0, 0, tiled=True), P(both)),
        "psum_local": (lambda v: lax.psum(v, "local"), P("procs")),
    }
    return {f"shard_map/{name}": local_value(jax.jit(jax.shard_map(
                body, mesh=mesh, in_specs=P(both), out_specs=out_spec, check_vma=False))(x))
            for name, (body, out_spec) in bodies.items()}


# ----------------------------------------------------------------- training
def training_program(jax, rows: int, steps: int = 3):
    """Data-parallel SGD on tests/support/jit_support.py's MLP: each device's batch
    shard gives gradients, pmean'd over every device (shard_map), then the
    same update everywhere. Returns the loss of each step on each device."""
    sys.path.insert(0, REPO)
    from tests.support.jit_support import mlp_data, mlp_loss
    from jax import lax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = global_mesh(jax, rows)
    both = ("procs", "local")
    params, x_global, labels_global = mlp_data(np.random.default_rng(5), (8, 16, 4),
                                               batch=4 * jax.device_count())
    x = from_process_local_data(jax, NamedSharding(mesh, P(both)), x_global)
    labels = from_process_local_data(jax, NamedSharding(mesh, P(both)), labels_global)

    def step(params, x, labels):
        loss, grads = jax.value_and_grad(mlp_loss)(params, x, labels)
        loss, grads = lax.pmean((loss, grads), both)
        return loss, jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)

    train = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P(both), P(both)),
                                  out_specs=(P(), P()), check_vma=False))
    losses = []
    for _ in range(steps):
        loss, params = train(params, x, labels)
        losses.append(local_value(loss))
    return {"train/losses": np.stack(losses)}


# ------------------------------------------------------------------- faults
# How long a process of a fault job waits for its peer's news (`wait_for`):
# only a hang guard, well inside the test's own limit on the job.
PEER_WAIT_SECONDS = 90.0


def ended_marker(out: str, process_id: int) -> str:
    """The file process `process_id` of a fault job creates once its
    execution has ended (failed or not): the processes' order is forced
    through these, never by sleeping."""
    return os.path.join(out, f"process{process_id}.ended")


def wait_for(path: str) -> None:
    """Return once `path` exists (another process's event); fail after
    PEER_WAIT_SECONDS."""
    deadline = time.monotonic() + PEER_WAIT_SECONDS
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {PEER_WAIT_SECONDS:g} s")
        time.sleep(0.01)


def fault_program(jax, fault: str, out: str):
    """A psum over every device (shard_map) that process 1 spoils (--fault):
    `die`: it exits inside the program, before the psum; `late`: it reaches
    the psum only once process 0's execution has ended (process 0 gave up
    waiting for it); `mismatch`: it brings an operand of another shape.
    Returns (compiled program, its argument)."""
    from jax import lax
    from jax.sharding import NamedSharding, PartitionSpec as P

    spoiled = jax.process_index() == 1

    def spoil(v):             # a host callback: runs in each process, on its devices' values
        if spoiled and fault == "die":
            os._exit(0)
        if spoiled and fault == "late":
            wait_for(ended_marker(out, 0))
        return v

    def body(v):
        v = jax.pure_callback(spoil, jax.ShapeDtypeStruct(v.shape, v.dtype), v)
        return lax.psum(v, ("procs", "local"))

    mesh = global_mesh(jax, jax.process_count())
    rows = 6 if spoiled and fault == "mismatch" else 4
    x = from_process_local_data(jax, NamedSharding(mesh, P(("procs", "local"))),
                                np.ones((rows * jax.device_count(), 3), np.float32))
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(("procs", "local")), out_specs=P(),
                              check_vma=False))
    return f.lower(x).compile(), x


def run_failing(jax, options) -> None:
    """Run the fault program; print how it failed and how long its execution took,
    mark its end (`ended_marker`); with a late peer, process 0 stays until the
    peer's execution has ended too (the peer hears of the failure from it);
    then leave at once (JAX's exit would wait for every process at a shutdown
    barrier)."""
    from jax._src import distributed

    compiled, x = fault_program(jax, options.fault, options.out)
    # Start together (JAX's own barrier, through its coordinator): the timeout
    # under test then measures the fault, not how long a process took to compile.
    distributed.global_state.client.wait_at_barrier("fault program compiled", 60_000)
    start = time.monotonic()
    try:
        compiled(x).block_until_ready()
        print(f"SUCCEEDED after {time.monotonic() - start:.2f} s", flush=True)
        code = 0
    except Exception as error:   # the failure under test
        print(f"FAILED after {time.monotonic() - start:.2f} s: {error}", flush=True)
        code = 1
    process_id = jax.process_index()
    open(ended_marker(options.out, process_id), "w").close()
    if options.fault == "late" and process_id == 0:
        wait_for(ended_marker(options.out, 1))
    os._exit(code)


PROGRAMS = {
    "pmap": lambda jax, rows: pmap_programs(jax, jax.process_index()),
    "jit": jit_programs,
    "shard_map": shard_map_programs,
    "train": training_program,
}


def main(argv=None) -> None:
    options = parse_arguments(argv)
    jax = start_jax(options)
    if options.fault:
        run_failing(jax, options)
    names = list(PROGRAMS) if options.programs == "all" else options.programs.split(",")
    results = {}
    rows = options.mesh_rows or jax.process_count()
    for name in names:
        results.update(PROGRAMS[name](jax, rows))
    os.makedirs(options.out, exist_ok=True)
    np.savez(os.path.join(options.out, f"{options.backend}_{jax.process_index()}.npz"), **results)
    print(f"process {jax.process_index()}: {len(results)} results", flush=True)


if __name__ == "__main__":
    main()
