"""``Snapshot``: the cluster as one scheduling cycle sees it, frozen.

Modelled on kube-scheduler's ``pkg/scheduler/backend/cache/snapshot.go``. At the start of every
scheduling cycle the scheduler calls ``SchedulerCache.update_snapshot(snapshot)``, which brings
this object up to date by cloning only the node infos that changed since (their generation is
newer than :attr:`Snapshot.generation`). Plugins read only the snapshot: the node infos in it
are private clones, so informer events and the binding cycles that run while a cycle is in
progress change the cache, never what the cycle sees.

The node list keeps the cache's node order (first added, first listed; a node that leaves and
comes back is listed last) and is rebuilt only when nodes join or leave; otherwise changed
entries are replaced in place. Treat everything here as
read-only: the cache replaces entries on the next update, it never merges into them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from gpusched.cache.nodeinfo import NodeInfo

__all__ = ["Snapshot"]


class Snapshot:
    """Node infos for one cycle (see the module docstring). Start with ``Snapshot()`` and keep
    passing the same object to ``SchedulerCache.update_snapshot``; a snapshot follows one
    cache only."""

    __slots__ = ("_list", "_map", "_membership", "_pos", "_recent", "generation")

    def __init__(self) -> None:
        self._map: dict[str, NodeInfo] = {}
        self._list: list[NodeInfo] = []
        self._pos: dict[str, int] = {}
        self._recent: OrderedDict[str, None] = OrderedDict()
        """Node names, least recently changed first (their generations increase along it)."""
        self._membership = -1
        self.generation = 0
        """The newest node-info generation this snapshot has seen (0: none)."""

    @property
    def membership(self) -> int:
        """A version that changes whenever nodes join or leave (not when they change)."""
        return self._membership

    def changed_since(self, generation: int) -> list[NodeInfo]:
        """The node infos newer than ``generation``, newest first. O(changed): the walk stops
        at the first node no newer than ``generation``. Nodes that joined or left are not
        reported: compare :attr:`membership` for those."""
        changed: list[NodeInfo] = []
        entries = self._map
        for name in reversed(self._recent):
            info = entries[name]
            if info.generation <= generation:
                break
            changed.append(info)
        return changed

    def node_infos(self) -> list[NodeInfo]:
        """Every node with a Node object, in the cache's node order. O(1): the list itself,
        not a copy; do not mutate it."""
        return self._list

    def get(self, name: str) -> NodeInfo | None:
        """The node info of node ``name``, or ``None``. O(1)."""
        return self._map.get(name)

    @property
    def num_nodes(self) -> int:
        return len(self._list)

    def __len__(self) -> int:
        return len(self._list)

    def __contains__(self, name: object) -> bool:
        return name in self._map

    def __iter__(self) -> Iterator[NodeInfo]:
        return iter(self._list)

    def __repr__(self) -> str:
        return f"Snapshot(nodes={len(self._list)}, generation={self.generation})"
