"""Several processes, one JAX program: a sharded sum across processes on pjrt-ref.

    pip install ".[mpi]"
    JAX_PLATFORMS=pjrt_ref UCX_TLS=self,sm mpiexec -n 2 python examples/distributed_quickstart.py

Each process starts with `jax.distributed.initialize` (MPI tells it its rank),
owns one pjrt_ref device, and contributes its rows of a global array; the
sum over all rows crosses the processes over MPI (pjrt_ref/distributed/).
`UCX_TLS=self,sm` keeps MPICH on this machine's shared memory.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

jax.distributed.initialize(cluster_detection_method="mpi4py")
rank, count = jax.process_index(), jax.process_count()
mesh = Mesh(np.array(jax.devices()), ("rows",))
rows = NamedSharding(mesh, P("rows"))

full = np.arange(count * 4 * 3, dtype=np.float32).reshape(count * 4, 3)
mine = full[rank * 4:(rank + 1) * 4]          # this process's rows
x = jax.make_array_from_single_device_arrays(
    full.shape, rows, [jax.device_put(mine, jax.local_devices()[0])])

column_sums = jax.jit(lambda x: jnp.sum(x * 2, axis=0),
                      out_shardings=NamedSharding(mesh, P()))(x)
result = np.asarray(column_sums.addressable_data(0))
expected = (full * 2).sum(axis=0)
print(f"process {rank} of {count} on {jax.devices()[rank].platform}: {result.tolist()}")
assert np.array_equal(result, expected), (result, expected)
if rank == 0:
    print(f"OK: {count} processes agree with numpy")
jax.distributed.shutdown()
