"""Process grids that span several OS processes ("hosts").

In JAX's multi-controller mode every OS process (a *host* here, as XLA
calls them) runs the same program on its own devices, and a collective
meets devices of all hosts. The StableHLO process grid does not change:
each device is still one process `(replica_id, partition_id)` with one
thread, but only this host's processes run here. A `HostPlacement` tells
the grid where each process runs and carries the transport between hosts
(`links`), so that `ProcessGrid.share` posts a value into this host's
mailbox for local readers and sends it once to every other host that has
readers, whose transport posts it into that host's mailbox.

The interpreter never sees how values travel. `links` is any object with

    this_host: int                        # this OS process's index
    store: MailStore                      # where values sent to this host land
    send(host, namespace, key, value, readers)   # post on `host`'s store
    fail(hosts, namespace, error_text)    # fail `namespace` on those hosts

(pjrt-ref's is the MPI transport of `pjrt_ref/distributed/`).

Grids are told apart by a namespace that every host derives the same way
(the same executions, run in the same order, as multi-controller JAX
requires of its processes): the n-th multi-host execution, then the
manual region and its run inside it.
"""
from __future__ import annotations

from dataclasses import dataclass

from pjrt_ref.interpreter.process_grid import Mailbox, ProcessGrid


@dataclass(frozen=True)
class HostPlacement:
    """Where a grid's processes run: `hosts[(replica, partition)] = host index`."""

    links: object
    hosts: dict
    name: tuple

    @property
    def this_host(self) -> int:
        return self.links.this_host

    def is_local(self, process_id) -> bool:
        return self.hosts[tuple(process_id)] == self.this_host

    def where(self, process_id) -> str:
        return f" on host process {self.hosts[tuple(process_id)]}"

    def child(self, *suffix) -> "HostPlacement":
        """The placement of a grid nested in this one's execution (a manual region's)."""
        return HostPlacement(self.links, self.hosts, self.name + suffix)

    def mailbox(self, timeout: float) -> Mailbox:
        """This grid's mailbox: its namespace in the store the transport fills."""
        return Mailbox(timeout, store=self.links.store, namespace=self.name)

    def share(self, mailbox: Mailbox, key, value, readers: list) -> None:
        """Post `value` for `readers`: locally, and once to every other host that has some."""
        counts: dict[int, int] = {}
        for reader in readers:
            host = self.hosts[tuple(reader)]
            counts[host] = counts.get(host, 0) + 1
        for host, count in sorted(counts.items()):
            if host == self.this_host:
                mailbox.post(key, value, readers=count)
            else:
                self.links.send(host, self.name, key, value, count)

    def fail_elsewhere(self, error: BaseException) -> None:
        """Tell the other hosts of the grid that it failed (their waits end at once)."""
        others = sorted(set(self.hosts.values()) - {self.this_host})
        if others:
            self.links.fail(others, self.name,
                            f"host process {self.this_host}: {type(error).__name__}: {error}")


def share_among_hosts(grid: ProcessGrid, tag: str, local_values: dict, what: str) -> dict:
    """Every process's value, on every host: each host contributes its local
    processes' `local_values` ({process id: value}) and gets all of them.

    This is how a partitioned execution puts global arguments together from
    the devices' shards, and collects the results of a manual region, when
    the devices are spread over hosts. `what` names the step in errors.
    """
    placement = grid.placement
    if placement is None:
        return dict(local_values)
    other_hosts = sorted(set(placement.hosts.values()) - {placement.this_host})
    for process_id, value in local_values.items():
        for host in other_hosts:
            placement.links.send(host, placement.name, (tag, tuple(process_id)), value, 1)
    return {process_id: local_values[process_id] if grid.is_local(process_id)
            else grid.mailbox.take((tag, tuple(process_id)), what,
                                   waiting_for=grid.describe(process_id))
            for process_id in placement.hosts}
