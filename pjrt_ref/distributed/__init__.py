"""pjrt-ref across processes: JAX's multi-controller mode.

Every process runs the same program on its own devices; collectives meet
devices of all processes. Public face:

    join(store, process_index, num_processes, local_device_count, plugin_version,
         timeout_seconds) -> Cluster
        the global device list agreed through the framework's key-value store
        (topology_exchange), and an MPI transport between the processes
        (mpi_transport), made by PJRT_Client_Create;
    Cluster: process_index, num_processes, devices, transport,
        next_execution(hosts), update_process_states(...), close();
    KeyValueStore (the protocol), ScopedStore, LocalStore (kv_store).

Below the object model nothing imports this package: the interpreter's
process grid gets the transport as an object with `send`/`fail`
(interpreter/process_hosts.py).
"""
from pjrt_ref.distributed.cluster import Cluster, ProcessState, join
from pjrt_ref.distributed.kv_store import KeyValueStore, LocalStore, ScopedStore
from pjrt_ref.distributed.topology_exchange import GlobalDevice

__all__ = ["Cluster", "GlobalDevice", "KeyValueStore", "LocalStore", "ProcessState",
           "ScopedStore", "join"]
