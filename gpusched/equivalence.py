"""Equivalence classes: one ranking of every node per kind of pod, kept up to date.

A burst of pods from one Job or ReplicaSet asks for the same thing: the same requests, the
same selectors and tolerations, the same number of GPUs. kube-scheduler evaluates each of
them afresh against a sample of the nodes (``percentageOfNodesToScore``: 10% of 5,000). Its
*opportunistic batching* (KEP-5598, 1.35) reuses the previous pod's sorted nodes when pods
have equal *signatures*, but only when each pod takes a whole node. gpusched packs several
GPU pods per node, so it keeps the idea and changes the bookkeeping:

- A pod's **signature** is what every deciding plugin reads of it (``SignPlugin``); a
  plugin that cannot vouch for a pod returns ``None`` and the pod takes the ordinary path.
- A **class** (per signature) holds, for every node, its Filter status and, if feasible, its
  Score (``Framework.score_node``), in a ``SortedList`` ranking, each entry tagged with the
  node-info generation it was computed at.
- Each cycle, the class re-evaluates only the nodes the snapshot says changed since the class
  last looked (``Snapshot.changed_since``): after one bind that is the one node that got the
  pod. Nodes joining or leaving rebuild the class.
- The winner is the top of the ranking: the best node of **all** nodes, which sampling only
  approximates. Ties are broken by a random draw per entry, so two replicas spread out, and the
  chosen node is filtered once more in the cycle's own state (which also records GPUFit's
  device choice there).
- With other active replicas (a ``gpusched.replicas.Share``), the class also ranks the feasible
  nodes of this replica's share apart, and the winner is the top of that ranking: the best node
  of the share, or of all nodes when no node of the share fits. Changed nodes of *other*
  shares are only marked stale, and re-evaluated when no node of the share fits (or the share
  changes): every pod another replica binds changes one of its nodes, which this replica would
  otherwise re-evaluate in every class it holds. The share ranking is rebuilt (O(n log n)) when
  the share changes, i.e. when replicas join or leave.

Exactness. A class is used only while it gives what a full evaluation of every node would: the
signature contract makes Filter and un-normalised Score functions of (signature, node info);
normalised plugins (TaintToleration, preferred NodeAffinity) may sign only when equal raw
scores normalise equal, and the class checks their raw scores *are* equal on every feasible
node (one ``Counter`` per such plugin); when they are not, the class is abandoned and its pods
take the ordinary path (and NodeAffinity declines pods with preferred terms up front). A node
of the share is chosen when the raw scores are equal on the feasible nodes *of the share*: the
contract maps equal raw scores to equal normalised ones, whatever the other nodes score, so
the share's ranking by the un-normalised total is what a full cycle over every node gives
there, stale nodes of other shares or not.

A class is built on a signature's *second* pod within the recently seen signatures, so a
stream of unlike pods never pays for building rankings (O(nodes) each) it cannot reuse.

Costs: building a class O(n) Filter + Score evaluations; a cycle O(c x (Filter + Score) +
c log n) for the c nodes changed since the class's last cycle, plus O(signature) to sign the
pod. Memory O(n) per class; at most ``max_classes`` classes (least recently used dropped).
"""

from __future__ import annotations

import logging
import random
from collections import Counter, OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sortedcontainers import SortedList

from gpusched.framework import CycleState, Framework, Pod, Status

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo, Snapshot
    from gpusched.replicas import Share

__all__ = ["EquivalenceCache", "Placement"]

log = logging.getLogger(__name__)

_Entry = tuple[int, float, str]
"""A ranked node: (-total score, random tie-break, node name); the smallest is the best."""


@dataclass
class Placement:
    """What a class says for one pod: the best node, or why none fits."""

    node: str | None
    statuses: dict[str, Status] = field(default_factory=dict)
    """Every infeasible node's Filter status (filled only when no node fits)."""
    status: Status | None = None
    """An error (a Score or PreScore failure) that ends the cycle."""
    evaluated: int = 0
    """Nodes evaluated this cycle."""
    feasible: int = 0
    """Feasible nodes in the class."""


class _Class:
    __slots__ = (
        "entries",
        "generation",
        "membership",
        "normalised",
        "own",
        "own_normalised",
        "ranked",
        "raw",
        "rejected",
        "share",
        "stale",
    )

    def __init__(self) -> None:
        self.generation = -1
        self.membership = -1
        self.entries: dict[str, _Entry] = {}
        self.ranked: SortedList = SortedList()
        self.rejected: dict[str, Status] = {}
        self.raw: dict[str, tuple[int, ...]] = {}
        """Feasible node -> raw scores of the normalised Score plugins."""
        self.normalised: list[Counter[int]] = []
        """Per normalised Score plugin: how many feasible nodes have each raw score."""
        self.share: Share | None = None
        self.own: SortedList | None = None
        """The entries of ``ranked`` in ``share`` (kept only while there is a share)."""
        self.own_normalised: list[Counter[int]] = []
        """``normalised`` over the feasible nodes of ``share`` only."""
        self.stale: set[str] = set()
        """Nodes of other shares changed since they were last evaluated (their entries, if
        any, are out of date). Empty without a share."""

    def use_share(self, share: Share | None) -> None:
        """Rank the nodes of ``share`` apart from now on (``None``: stop). O(n log n) when the
        share changed, else O(1). The caller re-evaluates ``stale`` nodes first."""
        if share is self.share:
            return
        assert not self.stale
        self.share = share
        self.own = None
        self.own_normalised = []
        if share is not None:
            self.own = SortedList(e for e in self.entries.values() if share.mine(e[2]))
            if self.normalised:
                self.own_normalised = [Counter() for _ in self.normalised]
                for entry in self.own:
                    self._count(self.own_normalised, self.raw[entry[2]], 1)

    def mine(self, name: str) -> bool:
        return self.share is None or self.share.mine(name)

    @staticmethod
    def _count(counters: list[Counter[int]], raw: tuple[int, ...], by: int) -> None:
        for counter, value in zip(counters, raw, strict=True):
            counter[value] += by
            if not counter[value]:
                del counter[value]

    def add(self, entry: _Entry, raw: tuple[int, ...]) -> None:
        name = entry[2]
        self.entries[name] = entry
        self.ranked.add(entry)
        self.raw[name] = raw
        if not self.normalised and raw:
            self.normalised = [Counter() for _ in raw]
            if self.own is not None:
                self.own_normalised = [Counter() for _ in raw]
        self._count(self.normalised, raw, 1)
        if self.own is not None and self.mine(name):
            self.own.add(entry)
            self._count(self.own_normalised, raw, 1)

    def clear(self) -> None:
        self.entries.clear()
        self.ranked.clear()
        if self.own is not None:
            self.own.clear()
        self.rejected.clear()
        self.raw.clear()
        self.normalised.clear()
        self.own_normalised.clear()
        self.stale.clear()

    def drop(self, name: str) -> None:
        entry = self.entries.pop(name, None)
        if entry is not None:
            self.ranked.remove(entry)
            raw = self.raw.pop(name)
            self._count(self.normalised, raw, -1)
            if self.own is not None and self.mine(name):
                self.own.remove(entry)
                self._count(self.own_normalised, raw, -1)
        else:
            self.rejected.pop(name, None)

    def uniform(self) -> bool:
        """Whether every normalised plugin gave every feasible node the same raw score."""
        return all(len(counter) <= 1 for counter in self.normalised)

    def own_uniform(self) -> bool:
        """``uniform`` over the feasible nodes of the share."""
        return all(len(counter) <= 1 for counter in self.own_normalised)

    def _check(self) -> None:
        assert len(self.ranked) == len(self.entries) == len(self.raw)
        assert not (self.entries.keys() & self.rejected.keys())
        for entry in self.ranked:
            assert self.entries[entry[2]] == entry
        for i, counter in enumerate(self.normalised):
            assert counter == Counter(raw[i] for raw in self.raw.values())
        if self.share is None:
            assert self.own is None
            assert not self.own_normalised
            assert not self.stale
            return
        assert self.own is not None
        assert list(self.own) == [e for e in self.ranked if self.share.mine(e[2])]
        assert not any(self.share.mine(name) for name in self.stale)
        for i, counter in enumerate(self.own_normalised):
            assert counter == Counter(self.raw[e[2]][i] for e in self.own)


class EquivalenceCache:
    """The classes of one scheduler (module docstring). Not thread-safe: call it from the
    serial scheduling cycle only."""

    def __init__(self, rng: random.Random | None = None, max_classes: int = 64) -> None:
        self._rng = rng or random.Random()
        self._max_classes = max_classes
        self._classes: OrderedDict[Hashable, _Class] = OrderedDict()
        self._seen: OrderedDict[Hashable, None] = OrderedDict()
        self._abandoned: OrderedDict[Hashable, int] = OrderedDict()
        """Signature -> the snapshot membership at which its class was given up."""
        self.hits = 0
        """Cycles answered by a class."""

    def __len__(self) -> int:
        return len(self._classes)

    def place(
        self,
        fw: Framework,
        state: CycleState,
        pod: Pod,
        signature: Hashable,
        snapshot: Snapshot,
        share: Share | None = None,
    ) -> Placement | None:
        """The best node for ``pod`` by its class, or ``None``: no class (yet) for this
        signature, or not a usable one; then the caller runs the ordinary cycle. PreFilter has
        run in ``state`` and restricted nothing. With a ``share`` (other replicas are active),
        the best node of the share if one fits, else the best of all."""
        cls = self._classes.get(signature)
        if cls is None:
            if self._abandoned.get(signature) == snapshot.membership:
                return None
            if signature not in self._seen:
                self._seen[signature] = None
                if len(self._seen) > 4 * self._max_classes:
                    self._seen.popitem(last=False)
                return None
            cls = _Class()
            self._classes[signature] = cls
            if len(self._classes) > self._max_classes:
                self._classes.popitem(last=False)
        else:
            self._classes.move_to_end(signature)
        if cls.membership != snapshot.membership:
            cls.clear()
            changed: Iterable[NodeInfo] = snapshot.node_infos()
            cls.membership = snapshot.membership
        else:
            changed = snapshot.changed_since(cls.generation)
        cls.generation = snapshot.generation
        if share is not cls.share and cls.stale:  # ownership moves: bring every node up to date
            changed = self._with_stale(cls, snapshot, changed)
        cls.use_share(share)
        if share is None:
            due = list(changed)
        else:
            due = []
            for node_info in changed:
                if share.mine(node_info.name):
                    due.append(node_info)
                else:
                    cls.stale.add(node_info.name)
        evaluated = self._evaluate_all(cls, fw, state, pod, due, signature, snapshot)
        if isinstance(evaluated, Placement) or evaluated is None:
            return evaluated
        if cls.own:  # a node of the share fits: the stale nodes of other shares can wait
            if not cls.own_uniform():
                self._give_up(signature, snapshot)
                return None
            best = cls.own[0][2]
        else:
            if cls.stale:
                late = self._evaluate_all(
                    cls, fw, state, pod, self._with_stale(cls, snapshot, ()), signature, snapshot
                )
                if isinstance(late, Placement) or late is None:
                    return late
                evaluated += late
            if not cls.uniform():
                self._give_up(signature, snapshot)
                return None
            if not cls.ranked:
                return Placement(None, dict(cls.rejected), evaluated=evaluated)
            best = cls.ranked[0][2]
        chosen = snapshot.get(best)
        check = fw.run_filter(state, pod, chosen) if chosen is not None else None
        if check is None or not check.is_success:
            # Only a plugin breaking the SignPlugin contract gets here: say so, use the
            # ordinary path.
            log.error(
                "equivalence class of %s ranked node %s first, but it does not pass Filter "
                "now (%s): a signing plugin's Filter depends on more than the pod's signature",
                (pod.get("metadata") or {}).get("name"),
                best,
                check.message() if check is not None else "node gone",
            )
            self._give_up(signature, snapshot)
            return None
        self.hits += 1
        return Placement(best, evaluated=evaluated, feasible=len(cls.ranked))

    @staticmethod
    def _with_stale(
        klass: _Class, snapshot: Snapshot, changed: Iterable[NodeInfo]
    ) -> list[NodeInfo]:
        """``changed`` and the class's stale nodes (once each); ``stale`` is emptied."""
        due = list(changed)
        seen = {ni.name for ni in due}
        for name in klass.stale - seen:
            node_info = snapshot.get(name)
            if node_info is not None:
                due.append(node_info)
        klass.stale.clear()
        return due

    def _evaluate_all(
        self,
        cls: _Class,
        fw: Framework,
        state: CycleState,
        pod: Pod,
        due: list[NodeInfo],
        signature: Hashable,
        snapshot: Snapshot,
    ) -> int | Placement | None:
        """PreScore and re-rank ``due``: how many were evaluated, or what ``place`` returns
        when that fails (``None``: PreScore failed, the class is given up)."""
        status = fw.run_pre_score(state, pod, due)
        if not status.is_success:
            self._give_up(signature, snapshot)
            return None
        evaluated = 0
        for node_info in due:
            evaluated += 1
            failed = self._evaluate(cls, fw, state, pod, node_info)
            if failed is not None:
                self._give_up(signature, snapshot)
                return Placement(None, status=failed, evaluated=evaluated)
        return evaluated

    def _evaluate(
        self, cls: _Class, fw: Framework, state: CycleState, pod: Pod, node_info: NodeInfo
    ) -> Status | None:
        """Re-rank one node; a Score error is returned (it ends the cycle)."""
        name = node_info.name
        cls.drop(name)
        status = fw.run_filter(state, pod, node_info)
        if not status.is_success:
            cls.rejected[name] = status
            return None
        total, raw, status = fw.score_node(state, pod, node_info)
        if not status.is_success:
            return status
        cls.add((-total, self._rng.random(), name), raw)
        return None

    def _give_up(self, signature: Hashable, snapshot: Snapshot) -> None:
        """Drop the class; its signature takes the ordinary path until nodes join or leave."""
        self._classes.pop(signature, None)
        self._abandoned[signature] = snapshot.membership
        if len(self._abandoned) > 4 * self._max_classes:
            self._abandoned.popitem(last=False)

    def clear(self) -> None:
        """Forget every class (a new configuration, or a test)."""
        self._classes.clear()
        self._seen.clear()
        self._abandoned.clear()

    def _check(self) -> None:
        for cls in self._classes.values():
            cls._check()
