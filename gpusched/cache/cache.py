"""The scheduler cache: bound and assumed pods aggregated per node, with their GPU devices.

Modelled on kube-scheduler's ``pkg/scheduler/backend/cache`` (``cache.go``, ``interface.go``;
formerly ``pkg/scheduler/internal/cache``, whose ``interface.go`` draws the state machine).
The cache holds every node and every pod that is bound to a node, or that the scheduler has
*assumed* onto one: the scheduling cycle decides, assumes the pod at once (so the next cycle
sees its CPU, memory and GPU devices as taken) and hands the API calls to the binding cycle,
which runs concurrently. Informers (reflectors over pods, nodes and ``GPUNodeInventory``
objects) feed it everything that is bound by anyone: gpusched, kube-scheduler, or a user who
set ``spec.nodeName``.

A pod's states in the cache::

       +---------------------------------------------+ +--------+
       |                     Add                     | |        | Update
       +    Assume                    Add            v v        |
    Initial -------> Assumed ------------------> Added ---------+
       ^              |  |  |                      |
       |    Forget    |  |  | Remove               | Remove, or Update to
       +--------------+  |  +-------------+        | Succeeded / Failed
                         |                v        |
                  Expire |             Deleted <---+
     (binding finished,  |
      TTL passed, no Add)v
                      Expired ---- Add ----> Added (booked again, as a new pod)

"Initial", "Expired" and "Deleted" pods are not in the cache. As upstream:

- a pod is assumed at most once (``assume_pod`` of a pod in the cache raises ``CacheError``);
- a pod may be added without being assumed (bound by someone else, or after a restart);
- an assumed pod expires only once its binding finished (``finish_binding``) and the TTL has
  passed with no Add: a bind still in flight never loses its devices. Upstream now sets the
  TTL to 0, never expire (kubernetes#106361: expiry raced slow binds and double-booked); the
  default here, 15 minutes, only guards against an Add that never comes, and ``None`` disables
  expiry. An Add after expiry books the pod again (a conflict if its devices went to someone
  else meanwhile, recorded on its ``PodInfo``).

Differences from upstream, on purpose: informer methods are forgiving, since the reflectors
(:mod:`gpusched.kube.reflector`) may collapse events across a re-list: ``update_pod`` of an
unknown pod adds it, ``add_pod`` of a known one updates it, ``remove_pod`` of an unknown one
does nothing, and an Update or Add to a terminal phase (Succeeded, Failed) removes the pod, as
the kubelet has freed its resources and devices. ``forget_pod`` of a pod that is not assumed
(never assumed, or already confirmed by an Add) does nothing and returns ``False``, so
Unreserve may call it unconditionally.

Incremental snapshots
    Every change to a node info takes a new generation from one process-wide counter and moves
    the node info to the most-recent end of an ordered map (upstream's doubly linked list with
    ``headNode``). ``update_snapshot`` walks from that end and stops at the first node info no
    newer than the snapshot: O(c x (pods + GPUs)) for the c node infos changed since the last
    cycle, plus O(n) only when nodes joined or left (the node list is rebuilt and deleted nodes
    are dropped; a membership version tells, where upstream compares counts). A cycle that
    follows a single bind clones one node; one with no change since the last costs O(1).

Costs (n nodes, p pods on the node concerned, G GPUs, a assumed pods): ``add_node``,
``update_node``, ``remove_node`` O(1) plus O(p x G) when the node's GPUs change (the ledger is
rebuilt and every pod booked again); pod events and ``assume_pod``/``forget_pod`` O(containers
+ G); ``cleanup_expired_assumed_pods`` O(a); ``dump`` and ``_check`` O(everything). Not
thread-safe: call it from the event loop only (informer callbacks, the scheduling cycle and the
binding tasks all run there).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol, runtime_checkable

from gpusched.annotations import GPU_IDS, Assignment
from gpusched.cache.errors import CacheError
from gpusched.cache.ledger import DEFAULT_POLICY, SharingPolicy
from gpusched.cache.nodeinfo import NodeInfo, PodInfo, next_generation, pod_uid
from gpusched.cache.nominations import Nominee, gpu_need
from gpusched.cache.snapshot import Snapshot
from gpusched.clock import Clock
from gpusched.inventory import RESOURCE_GPU, GPUNodeInventory
from gpusched.priority import pod_priority

__all__ = [
    "DEFAULT_ASSUMED_TTL",
    "TERMINAL_PHASES",
    "ClaimedDevicesSource",
    "ClaimedSetter",
    "SchedulerCache",
]

log = logging.getLogger(__name__)

DEFAULT_ASSUMED_TTL: Final = 15 * 60.0
"""Seconds an assumed pod whose binding finished waits for its Add before it expires."""

TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
"""Pod phases in which the kubelet has released the pod's resources and devices."""


class _PodState:
    """Where a pod is and whether it is assumed (upstream's ``podState``)."""

    __slots__ = ("assigned", "assumed", "binding_finished", "deadline", "node_name", "pod")

    def __init__(
        self,
        pod: Mapping[str, Any],
        node_name: str,
        *,
        assumed: bool = False,
        assigned: Assignment | None = None,
    ) -> None:
        self.pod = pod
        self.node_name = node_name
        self.assumed = assumed
        self.assigned = assigned
        """The assignment the scheduler assumed the pod with: it stays the pod's declared
        devices if the bound pod turns out to carry no assignment annotations."""
        self.binding_finished = False
        self.deadline: float | None = None


def _node_name(node: Mapping[str, Any]) -> str:
    return str(node["metadata"]["name"])


def _is_terminal(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") in TERMINAL_PHASES


def _annotated(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    return GPU_IDS in (meta.get("annotations") or {})


ClaimedSetter = Callable[[str, Mapping[str | int, str], int], None]
"""``set_claimed(node, claimed, version)``: what a :class:`ClaimedDevicesSource` is given."""


@runtime_checkable
class ClaimedDevicesSource(Protocol):
    """A plugin that knows devices held outside pods (ResourceClaims: DynamicResources). The
    scheduler gives it, once at start-up, a setter that marks them in the cache's ledgers
    (:meth:`SchedulerCache.set_claimed`) and re-queues pods waiting for GPUs when some are
    unmarked. The seam between DRA and the device ledger: GPUFit sees them taken."""

    def attach_cache(self, set_claimed: ClaimedSetter) -> None: ...


class SchedulerCache:
    """Nodes, bound and assumed pods, GPU ledgers; see the module docstring.

    ``clock`` drives assumed-pod expiry (``monotonic()``); ``assumed_ttl`` in seconds, ``None``
    never to expire; ``policy`` is the GPU sharing policy of every node without one of its own
    (:meth:`set_node_policy`).
    """

    def __init__(
        self,
        clock: Clock,
        assumed_ttl: float | None = DEFAULT_ASSUMED_TTL,
        *,
        policy: SharingPolicy = DEFAULT_POLICY,
    ) -> None:
        self._clock = clock
        self._ttl = assumed_ttl
        self._policy = policy
        self._nodes: OrderedDict[str, NodeInfo] = OrderedDict()
        """Every node info, ghosts included, least recently changed first."""
        self._live: dict[str, None] = {}
        """Nodes with a Node object, in the order they were added: the snapshot's order."""
        self._membership = 0
        """Bumped whenever a node joins or leaves ``_live``: a snapshot built at another value
        must rebuild its node list."""
        self._pods: dict[str, _PodState] = {}
        self._assumed: dict[str, None] = {}
        self._inventories: dict[str, GPUNodeInventory] = {}
        self._policies: dict[str, SharingPolicy] = {}
        """Node policies the scheduler resolved, by node name (others get ``_policy``)."""
        self._nominated: dict[str, str] = {}
        """Pod uid -> the node it is nominated to (:meth:`nominate`)."""
        self._claimed: dict[str, tuple[dict[str | int, str], int]] = {}
        """Node -> the devices ResourceClaims hold there, and the version (:meth:`set_claimed`)."""

    # --- Nodes --------------------------------------------------------------------------

    def add_node(self, node: Mapping[str, Any]) -> NodeInfo:
        """A Node was added (or listed). Same as :meth:`update_node`."""
        name = _node_name(node)
        info = self._nodes.get(name)
        if info is None:
            info = NodeInfo(name, node, self._inventories.get(name), policy=self._policy_of(name))
            if name in self._claimed:
                info.set_claimed(*self._claimed[name])
            self._nodes[name] = info
        else:
            info.set_node(node)
            self._nodes.move_to_end(name)
        if name not in self._live:
            self._live[name] = None
            self._membership += 1
        return info

    def update_node(self, node: Mapping[str, Any]) -> NodeInfo:
        """A Node changed (labels, taints, allocatable, ...); an unknown one is added."""
        return self.add_node(node)

    def remove_node(self, node: Mapping[str, Any] | str) -> bool:
        """A Node was deleted. Its pods stay (their deletions arrive on another watch) on a
        ghost node info that no snapshot shows; ``False`` if the node was not known."""
        name = node if isinstance(node, str) else _node_name(node)
        info = self._nodes.get(name)
        if info is None or info.node is None:
            return False
        del self._live[name]
        self._membership += 1
        for uid in info.nominated:
            del self._nominated[uid]
        info.nominated.clear()
        if info.pods:
            info.set_node(None)
            self._nodes.move_to_end(name)
        else:
            del self._nodes[name]
        return True

    def set_inventory(self, node_name: str, inventory: GPUNodeInventory | None) -> None:
        """The node's ``GPUNodeInventory`` was added, changed (``inventory``) or deleted
        (``None``: the node's GPUs become anonymous). May come before or after the Node."""
        if inventory is None:
            self._inventories.pop(node_name, None)
        else:
            self._inventories[node_name] = inventory
        info = self._nodes.get(node_name)
        if info is not None:
            info.set_inventory(inventory)
            self._nodes.move_to_end(node_name)

    def set_node_policy(self, node_name: str, policy: SharingPolicy | None) -> None:
        """Share ``node_name``'s GPUs by ``policy`` (the node policy the scheduler resolved for
        it; ``None``: the cache's default again). May come before the Node. O(1) when nothing
        changes, else O(pods x GPUs) (:meth:`NodeInfo.set_policy`)."""
        if policy is None:
            self._policies.pop(node_name, None)
        else:
            self._policies[node_name] = policy
        info = self._nodes.get(node_name)
        if info is not None and info.policy != self._policy_of(node_name):
            info.set_policy(self._policy_of(node_name))
            self._nodes.move_to_end(node_name)

    def set_claimed(
        self, node_name: str, claimed: Mapping[str | int, str], version: int = 0
    ) -> bool:
        """The devices ResourceClaims hold on ``node_name`` now (UUID, or index of an
        anonymous GPU -> ``namespace/name`` of the claim; empty: none), from the
        DynamicResources plugin: the ledger never gives them to a pod that does not use the
        claim (:meth:`NodeLedger.set_claimed`); a new ``version`` (the source's, of what else
        it sees on the node) moves the node's generation (:meth:`NodeInfo.set_claimed`). May
        come before the Node. Returns whether a device lost its mark (pods waiting for GPUs are
        worth trying again). O(GPUs + MIG devices).
        """
        before = self._claimed.get(node_name, ({}, 0))[0]
        freed = not before.keys() <= claimed.keys()
        if claimed or version:
            self._claimed[node_name] = (dict(claimed), version)
        else:
            self._claimed.pop(node_name, None)
        info = self._nodes.get(node_name)
        if info is not None and info.set_claimed(claimed, version):
            self._nodes.move_to_end(node_name)
        return freed

    def _policy_of(self, node_name: str) -> SharingPolicy:
        return self._policies.get(node_name, self._policy)

    # --- Pods from informers --------------------------------------------------------------

    def add_pod(self, pod: Mapping[str, Any]) -> PodInfo | None:
        """A bound pod was added: Initial or Expired -> Added, or Assumed -> Added (the bind
        is confirmed). Returns its PodInfo, or ``None`` if it is unbound or terminal."""
        return self._observe(pod)

    def update_pod(
        self, pod: Mapping[str, Any], old: Mapping[str, Any] | None = None
    ) -> PodInfo | None:
        """A bound pod changed (``old`` is accepted for informer handlers and ignored)."""
        return self._observe(pod)

    def remove_pod(self, pod: Mapping[str, Any] | str) -> bool:
        """A pod was deleted (a pod or its UID): Added or Assumed -> Deleted. ``False`` if it
        was not in the cache."""
        uid = pod if isinstance(pod, str) else pod_uid(pod)
        state = self._pods.get(uid)
        if state is None:
            return False
        self._remove(uid, state)
        return True

    def _observe(self, pod: Mapping[str, Any]) -> PodInfo | None:
        uid = pod_uid(pod)
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        state = self._pods.get(uid)
        if node_name and uid in self._nominated:  # bound: placed, wherever it is
            self.clear_nomination(uid)
        if not node_name or _is_terminal(pod):
            if state is not None and (node_name or not state.assumed):
                self._remove(uid, state)
            return None
        if state is None:
            info = self._node_for(node_name).add_pod(pod)
            self._pods[uid] = _PodState(pod, node_name)
            self._nodes.move_to_end(node_name)
            return info
        fallback = state.assigned if not _annotated(pod) else None
        if state.assumed:
            del self._assumed[uid]
            state.assumed = False
            state.binding_finished = False
            state.deadline = None
        if node_name != state.node_name:
            log.warning(
                "pod %s was on node %s and is now reported on %s; moving it",
                uid,
                state.node_name,
                node_name,
            )
            self._remove(uid, state)
            info = self._node_for(node_name).add_pod(pod, fallback)
            self._pods[uid] = _PodState(pod, node_name, assigned=state.assigned)
        else:
            info = self._nodes[node_name].update_pod(pod, fallback)
            state.pod = pod
        self._nodes.move_to_end(node_name)
        return info

    def _node_for(self, name: str) -> NodeInfo:
        info = self._nodes.get(name)
        if info is None:  # a pod before its node: a ghost until the Node arrives
            info = NodeInfo(name, None, self._inventories.get(name), policy=self._policy_of(name))
            if name in self._claimed:
                info.set_claimed(*self._claimed[name])
            self._nodes[name] = info
        return info

    def _remove(self, uid: str, state: _PodState) -> None:
        del self._pods[uid]
        self._assumed.pop(uid, None)
        name = state.node_name
        info = self._nodes[name]
        info.remove_pod(uid)
        if info.node is None and not info.pods:
            del self._nodes[name]
        else:
            self._nodes.move_to_end(name)

    # --- The scheduler's own decisions ------------------------------------------------------

    def assume_pod(
        self,
        pod: Mapping[str, Any],
        node_name: str,
        assignment: Assignment | None,
        *,
        enforce_limits: bool = True,
    ) -> PodInfo:
        """Initial -> Assumed: the scheduling cycle chose ``node_name`` and, for a GPU pod,
        ``assignment``; from now on every snapshot counts the pod and its devices there.

        Raises :class:`CacheError` if the pod is already in the cache or the node is unknown,
        :class:`LedgerError` if the devices are not free (a stale snapshot: a bug); in both
        cases nothing changes. ``pod`` need not carry ``spec.nodeName``.
        ``enforce_limits=False`` books a share even beyond the node's sharing limits, as for a
        bound pod (another replica's reservation counted as a phantom holds its GPU whatever
        this replica's view says).
        """
        uid = pod_uid(pod)
        state = self._pods.get(uid)
        if state is not None:
            what = "assumed" if state.assumed else "added"
            raise CacheError(f"pod {uid} is already {what} on node {state.node_name}")
        info = self._nodes.get(node_name)
        if info is None or info.node is None:
            raise CacheError(f"cannot assume pod {uid} onto unknown node {node_name}")
        placed = info.add_pod(pod, assignment, assumed=True, enforce_limits=enforce_limits)
        if uid in self._nominated:  # as upstream's assume: the pod holds its devices now
            self.clear_nomination(uid)
            info.generation = next_generation()  # the node assumed onto stays the newest
        self._pods[uid] = _PodState(pod, node_name, assumed=True, assigned=placed.declared)
        self._assumed[uid] = None
        self._nodes.move_to_end(node_name)
        return placed

    def finish_binding(self, pod: Mapping[str, Any] | str) -> None:
        """The binding cycle is done with an assumed pod (bound or not): from now its TTL
        runs. Does nothing for a pod that is not assumed."""
        uid = pod if isinstance(pod, str) else pod_uid(pod)
        state = self._pods.get(uid)
        if state is not None and state.assumed:
            state.binding_finished = True
            if self._ttl is not None:
                state.deadline = self._clock.monotonic() + self._ttl

    def forget_pod(self, pod: Mapping[str, Any] | str) -> bool:
        """Assumed -> Initial: undo :meth:`assume_pod` (Unreserve; a failed bind). ``False``
        and nothing changes if the pod is not assumed (not in the cache, or already Added:
        the bind went through after all, and the pod stays)."""
        uid = pod if isinstance(pod, str) else pod_uid(pod)
        state = self._pods.get(uid)
        if state is None or not state.assumed:
            if state is not None:
                log.info("not forgetting pod %s: it is already bound to %s", uid, state.node_name)
            return False
        self._remove(uid, state)
        return True

    def cleanup_expired_assumed_pods(self) -> list[str]:
        """Assumed -> Expired for every assumed pod whose binding finished more than the TTL
        ago without an Add; returns their UIDs. Call it periodically (upstream: every second;
        see :meth:`run_cleanup`). O(assumed pods)."""
        if self._ttl is None or not self._assumed:
            return []
        now = self._clock.monotonic()
        expired = []
        for uid in self._assumed:
            state = self._pods[uid]
            if state.binding_finished and state.deadline is not None and now > state.deadline:
                expired.append(uid)
        for uid in expired:
            state = self._pods[uid]
            log.warning("assumed pod %s on node %s expired", uid, state.node_name)
            self._remove(uid, state)
        return expired

    async def run_cleanup(
        self, period: float = 1.0, on_expired: Callable[[list[str]], None] | None = None
    ) -> None:
        """Expire assumed pods every ``period`` seconds of the cache's clock, until cancelled;
        ``on_expired`` is told the UIDs expired in a round (their devices are free again)."""
        while True:
            await self._clock.sleep(period)
            expired = self.cleanup_expired_assumed_pods()
            if expired and on_expired is not None:
                on_expired(expired)

    def is_assumed(self, uid: str) -> bool:
        return uid in self._assumed

    # --- Nominations (gpusched.cache.nominations) -------------------------------------------

    def nominate(self, pod: Mapping[str, Any], node_name: str) -> bool:
        """Keep ``node_name``'s GPUs for ``pod`` (preemption nominated it there): pods of lower
        priority are refused what the pod needs there (NominatedReservation). Replaces the
        pod's earlier nomination; ``False`` (and nothing kept) when the node is unknown or the
        pod is already in the cache (assumed or bound). The nomination goes on its own when
        the pod is assumed or bound, or its node deleted; the scheduler clears it when the pod
        is deleted. O(1) plus the request read (~3 us)."""
        uid = pod_uid(pod)
        info = self._nodes.get(node_name)
        if info is None or info.node is None or uid in self._pods:
            return False
        previous = self._nominated.get(uid)
        if previous is not None and previous != node_name:
            self.clear_nomination(uid)
        meta = pod.get("metadata") or {}
        name = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        info.nominate(Nominee(uid, name, pod_priority(pod), gpu_need(pod)))
        self._nominated[uid] = node_name
        self._nodes.move_to_end(node_name)
        return True

    def clear_nomination(self, pod: Mapping[str, Any] | str) -> bool:
        """Forget the pod's nomination (a pod or its uid); ``False`` if it has none. O(1)."""
        uid = pod if isinstance(pod, str) else pod_uid(pod)
        node_name = self._nominated.pop(uid, None)
        if node_name is None:
            return False
        info = self._nodes.get(node_name)
        if info is not None and info.clear_nomination(uid):
            self._nodes.move_to_end(node_name)
        return True

    def nominated_node(self, uid: str) -> str | None:
        """The node pod ``uid`` is nominated to, or ``None``."""
        return self._nominated.get(uid)

    # --- Reading ------------------------------------------------------------------------

    def get_pod(self, uid: str) -> Mapping[str, Any] | None:
        """The pod as last seen (assumed or added), or ``None``."""
        state = self._pods.get(uid)
        return state.pod if state is not None else None

    def pod_node(self, uid: str) -> str | None:
        """The node a pod is on (or assumed onto), or ``None``."""
        state = self._pods.get(uid)
        return state.node_name if state is not None else None

    def node_info(self, name: str) -> NodeInfo | None:
        """The cache's own node info (ghosts included), for tests and debugging: never mutate
        it, and never hand it to plugins (they read snapshots)."""
        return self._nodes.get(name)

    @property
    def node_count(self) -> int:
        """Nodes with a Node object (ghosts excluded)."""
        return len(self._live)

    @property
    def pod_count(self) -> int:
        """Pods in the cache, assumed ones included."""
        return len(self._pods)

    @property
    def assumed_count(self) -> int:
        return len(self._assumed)

    # --- Snapshots ----------------------------------------------------------------------

    def update_snapshot(self, snapshot: Snapshot) -> None:
        """Bring ``snapshot`` up to date for a new scheduling cycle (upstream's
        ``UpdateSnapshot``): clone the node infos changed since its generation, drop deleted
        nodes, rebuild the node list only if nodes joined or left. Cost in the module
        docstring."""
        seen = snapshot.generation
        entries = snapshot._map
        replaced: list[NodeInfo] = []
        for info in reversed(self._nodes.values()):
            if info.generation <= seen:
                break
            if info.node is None:  # a ghost: dropped below if the snapshot has it
                continue
            clone = info.clone()
            entries[info.name] = clone
            replaced.append(clone)
        if self._nodes:
            snapshot.generation = next(reversed(self._nodes.values())).generation
        recent = snapshot._recent
        for clone in reversed(replaced):  # oldest first, so generations increase along it
            recent[clone.name] = None
            recent.move_to_end(clone.name)
        live = self._live
        if snapshot._membership != self._membership:
            # Nodes joined or left (upstream counts them; a version also sees a node that left
            # and came back, which moves to the end of the list).
            snapshot._membership = self._membership
            if len(entries) > len(live):
                for name in [name for name in entries if name not in live]:
                    del entries[name]
                    recent.pop(name, None)
            snapshot._list = [entries[name] for name in live]
            snapshot._pos = {name: i for i, name in enumerate(live)}
        else:
            positions = snapshot._pos
            node_list = snapshot._list
            for clone in replaced:
                node_list[positions[clone.name]] = clone

    # --- Debugging ----------------------------------------------------------------------

    def dump(self) -> dict[str, Any]:
        """Everything in the cache, JSON-friendly (upstream's ``Dump``; for debugging, costly)."""
        return {
            "nodes": {name: info.describe() for name, info in self._nodes.items()},
            "pods": {
                uid: {
                    "node": state.node_name,
                    "assumed": state.assumed,
                    "bindingFinished": state.binding_finished,
                    "deadline": state.deadline,
                }
                for uid, state in self._pods.items()
            },
            "assumed": list(self._assumed),
            "nominated": dict(self._nominated),
            "inventories": sorted(self._inventories),
        }

    def _check(self, snapshot: Snapshot | None = None) -> None:
        """Assert every invariant; with ``snapshot`` (just updated), that it equals the cache.

        Every pod is on exactly one node info, the one its state names; the assumed set is
        the assumed states; each node info's invariants (requested, ledger = the pods'
        assignments, conflicts) hold; its ledger is built from its inventory, or from its
        ``nvidia.com/gpu`` count; generations increase along the recency order; ghosts have
        pods and only live nodes are listed. O(everything).
        """
        where: dict[str, str] = {}
        previous = 0
        for name, info in self._nodes.items():
            assert info.name == name, (name, info.name)
            assert info.generation > previous, (name, info.generation, previous)
            previous = info.generation
            info._check()
            for uid in info.pods:
                assert uid not in where, (uid, where.get(uid), name)
                where[uid] = name
            inventory = self._inventories.get(name)
            assert info._inventory is inventory, name
            assert info.policy == self._policy_of(name), name
            if info.node is None:
                assert info.pods, name
                assert name not in self._live, name
                continue
            assert name in self._live, name
            if inventory is not None:
                assert info.ledger.inventory == inventory, name
            else:
                assert info.ledger.inventory is None, name
                assert info.ledger.gpu_count == info.allocatable.scalar.get(RESOURCE_GPU, 0)
        assert len(self._live) == sum(1 for i in self._nodes.values() if i.node is not None)
        nominated = {uid: n for n, i in self._nodes.items() for uid in i.nominated}
        assert nominated == self._nominated, (nominated, self._nominated)
        assert self._nominated.keys().isdisjoint(self._pods), "a placed pod is still nominated"
        assert where.keys() == self._pods.keys(), where.keys() ^ self._pods.keys()
        for uid, state in self._pods.items():
            assert where[uid] == state.node_name, (uid, where[uid], state.node_name)
            assert (uid in self._assumed) == state.assumed, uid
            pod_info = self._nodes[state.node_name].pods[uid]
            assert pod_info.pod is state.pod, uid
            if state.assumed:  # booked when assumed; a later GPU change may clash with it
                assert pod_info.declared == state.assigned, (pod_info.declared, state.assigned)
            else:
                assert not state.binding_finished, uid
                assert state.deadline is None, uid
            if state.deadline is not None:
                assert state.binding_finished, uid
        if snapshot is None:
            return
        if self._nodes:
            assert snapshot.generation == next(reversed(self._nodes.values())).generation
        assert snapshot._membership == self._membership, "snapshot node list is stale"
        assert [i.name for i in snapshot._list] == list(self._live), "snapshot node order"
        assert snapshot._map.keys() == self._live.keys(), "snapshot nodes"
        assert snapshot._recent.keys() == snapshot._map.keys(), "snapshot recency order"
        generations = [snapshot._map[name].generation for name in snapshot._recent]
        assert generations == sorted(generations), "snapshot recency order"
        for position, clone in enumerate(snapshot._list):
            info = self._nodes[clone.name]
            assert snapshot._map[clone.name] is clone, clone.name
            assert snapshot._pos[clone.name] == position, clone.name
            assert clone is not info, clone.name
            assert clone.ledger is not info.ledger, clone.name
            assert clone.requested is not info.requested, clone.name
            assert clone.generation == info.generation, clone.name
            assert clone.describe() == info.describe(), clone.name
