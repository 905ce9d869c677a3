"""The scheduler's side of GPU policies: informers in, node limits to the cache, status out.

:class:`PolicyManager` is fed by four informers (``GPUNodePolicy``, ``ClusterGPUPolicy``,
``GPUClass`` and the nodes' labels) and keeps one :class:`~.resolve.PolicyResolver`. It tells
the cache each node's :class:`~gpusched.cache.ledger.SharingPolicy` through an injected
``set_node_policy(node, policy | None)``, and only when that node's limits changed: a node
heartbeat costs a label comparison, a relabelled node one memoised resolution, and a policy
change a new resolver and one resolution per distinct combination of selected label values,
then a dictionary lookup per node (O(nodes)). ``None`` goes to the cache when a node is back on
the built-in defaults or deleted, so the cache keeps nothing for it.

**Saying who won.** Reports (:func:`~.resolve.policy_reports`, O(nodes x P)) are not computed
per event: any change marks the manager dirty, and :meth:`PolicyManager.flush` (called by
:meth:`PolicyManager.run` once changes have been quiet for ``debounce`` seconds) computes them
once, puts one Warning ``Overridden`` Event on each policy whose override message changed (not
one per node, and not again while it stays the same), and returns the status each policy
object should have (``matchingNodes``; conditions ``Applied`` and, for node policies,
``Overridden``; a ``ClusterGPUPolicy`` not named ``default`` is told it does not apply).
:meth:`run` writes those that differ from what the informer shows through the ``status``
subresource (merge patch); our own write comes back through the informer equal to
what we want, so it causes no further write. A condition keeps its ``lastTransitionTime``
while its status stays the same (``metav1.Condition``'s rule).

**Invalid objects** (:class:`~.models.PolicyError`: what the CRD schema cannot check) are
ignored as if absent, never crash anything: one log line and one Warning ``InvalidSpec`` Event
per distinct problem (not per resync), and a status condition (``Applied=False`` for
policies, ``Matched=False`` for classes) naming each bad field. Ignoring, rather than keeping
the last valid version, keeps a restarted scheduler's limits equal to a running one's.

**Classes** (:attr:`PolicyManager.classes`: name -> valid ``GPUClass``) are a live read-only
mapping for placement plugins, which reach it through ``Handle.gpu_classes``. Fed the nodes'
GPUs too (``on_inventory``; a change of telemetry alone is not one), :meth:`flush` gives each
class its status: ``matchingNodes``, ``matchingGPUs`` (MIG devices for a MIG class) and
``Matched`` saying, when no GPU matches, the commonest reasons (:func:`~.resolve.match_class`),
O(nodes x classes x GPUs) per flush.

**WoolyAI's objects** (``woolyai.dev/v1alpha1`` ``ClusterGPUPolicy``, ``WoolyNodePolicy``,
``GPUClass``; three more informers, ``on_woolyai_*``) are read as gpusched's
(:mod:`~.woolyai`) and join the same resolution, by that module's precedence rule; a WoolyAI
class whose name a gpusched class also has is not used (a Warning ``Shadowed`` Event on it).
They get Events but no status writes.

Not thread-safe; everything runs on the scheduler's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpusched.cache.ledger import DEFAULT_POLICY, SharingPolicy
from gpusched.clock import Clock
from gpusched.gpu_policy.models import (
    API_GROUP,
    API_VERSION,
    CLUSTER_POLICY_NAME,
    CONDITION_APPLIED,
    CONDITION_MATCHED,
    CONDITION_OVERRIDDEN,
    VERSION,
    ClusterGPUPolicy,
    GPUClass,
    GPUNodePolicy,
    PolicyError,
    parse_policy_object,
)
from gpusched.gpu_policy.resolve import (
    EffectivePolicy,
    PolicyReport,
    PolicyResolver,
    match_class,
    policy_reports,
    select_cluster_policy,
)
from gpusched.gpu_policy.woolyai import (
    KIND_CLASS,
    KIND_CLUSTER,
    KIND_NODE_POLICY,
    WOOLY_API_VERSION,
    parse_woolyai_object,
)
from gpusched.gpu_policy.woolyai import PLURALS as WOOLYAI_PLURALS
from gpusched.inventory import GPUDevice
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError, APIForbidden, APINotFound

__all__ = [
    "PLURALS",
    "REASON_INVALID",
    "REASON_OVERRIDDEN",
    "REASON_SHADOWED",
    "EventFn",
    "PolicyManager",
    "StatusWrite",
    "sharing_policy",
]

log = logging.getLogger(__name__)

PLURALS: Final[dict[str, str]] = {
    "GPUClass": "gpuclasses",
    "GPUNodePolicy": "gpunodepolicies",
    "ClusterGPUPolicy": "clustergpupolicies",
}
"""Resource (plural) of each kind, for informers and status paths."""

EventFn = Callable[[Mapping[str, Any], str, str, str, str], None]
"""``event(regarding, type, reason, action, message)``: ``EventRecorder.eventf``."""

REASON_INVALID: Final = "InvalidSpec"
"""Reason of the Warning Event and status condition on an object the scheduler ignores."""
REASON_OVERRIDDEN: Final = "Overridden"
"""Reason of the Warning Event on a policy that loses a field it sets on some node."""
REASON_SHADOWED: Final = "Shadowed"
"""Reason of the Warning Event on a WoolyAI class not used: a gpusched class has its name."""
_ACTION: Final = "Resolve"
_WIRE_KIND: Final[dict[str, tuple[str, str]]] = {
    KIND_CLUSTER: ("ClusterGPUPolicy", WOOLY_API_VERSION),
    KIND_NODE_POLICY: ("WoolyNodePolicy", WOOLY_API_VERSION),
    KIND_CLASS: ("GPUClass", WOOLY_API_VERSION),
}
"""WoolyAI's ref kinds -> (the object's kind, apiVersion); gpusched's are their own."""


def sharing_policy(effective: EffectivePolicy) -> SharingPolicy:
    """The ledger's limits for a node with ``effective`` limits. O(1)."""
    return SharingPolicy(
        allow_shared=effective.allow_sharing,
        vram_percent=effective.vram_overcommit_percent,
        max_clients_per_gpu=effective.max_clients_per_gpu,
        max_clients_per_node=effective.max_clients_per_node,
    )


@dataclass(frozen=True, slots=True)
class StatusWrite:
    """The ``status`` one policy object should have (a merge patch of ``/status``)."""

    kind: str
    name: str
    status: dict[str, Any]

    @property
    def path(self) -> str:
        return resource_path(API_GROUP, VERSION, PLURALS[self.kind]) + f"/{self.name}/status"


def _ref(kind: str, name: str) -> str:
    return f"{kind}/{name}"


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _generation(obj: Mapping[str, Any]) -> int | None:
    gen = (obj.get("metadata") or {}).get("generation")
    return gen if isinstance(gen, int) else None


class PolicyManager:
    """GPU policies and classes from informers to the cache, Events and status (module
    docstring). Handlers take the informers' ``(kind, obj, old)``; ``on_node`` takes labels."""

    def __init__(
        self,
        set_node_policy: Callable[[str, SharingPolicy | None], None],
        clock: Clock,
        *,
        event: EventFn | None = None,
        debounce: float = 1.0,
        retry: float = 5.0,
    ) -> None:
        self._set_node_policy = set_node_policy
        self._clock = clock
        self._event = event
        self.debounce = debounce
        self.retry = retry
        # Raw objects as the informers show them, by ``Kind/name``, valid or not.
        self._objects: dict[str, dict[str, Any]] = {}
        self._node_policies: dict[str, GPUNodePolicy] = {}
        self._cluster_policies: dict[str, ClusterGPUPolicy] = {}
        self._woolyai_node_policies: dict[str, GPUNodePolicy] = {}
        self._woolyai_cluster_policies: dict[str, ClusterGPUPolicy] = {}
        self._own_classes: dict[str, GPUClass] = {}
        self._woolyai_classes: dict[str, GPUClass] = {}
        self._classes: dict[str, GPUClass] = {}
        """The classes in use: gpusched's, and WoolyAI's whose name gpusched has not."""
        self._classes_view = types.MappingProxyType(self._classes)
        self._told_shadowed: set[str] = set()
        self._invalid: dict[str, PolicyError] = {}
        self._labels: dict[str, Mapping[str, str]] = {}
        self._gpus: dict[str, tuple[GPUDevice, ...]] = {}
        self._effective: dict[str, EffectivePolicy] = {}
        self._sent: dict[str, SharingPolicy] = {}
        """What the cache was told per node; absent: nothing (the cache's default)."""
        self._told: dict[str, str] = {}
        """``Kind/name`` -> the Overridden message last put in an Event on it."""
        self._told_invalid: dict[str, str] = {}
        self.resolver = PolicyResolver((), None)
        self.reports: dict[str, PolicyReport] = {}
        """The last :meth:`flush`'s reports, by ``Kind/name``."""
        self._forbidden_told = False
        self.dirty = asyncio.Event()
        """Set when reports (and so Events and status) may have changed."""

    # ------------------------------------------------------------------ reading

    @property
    def classes(self) -> Mapping[str, GPUClass]:
        """The valid GPU classes by name: a live read-only view (for ``Handle.gpu_classes``)."""
        return self._classes_view

    def effective(self, node: str) -> EffectivePolicy | None:
        """The limits resolved for a node the manager has seen, and who decided each."""
        return self._effective.get(node)

    def invalid(self) -> dict[str, str]:
        """``Kind/name`` -> why each ignored object is invalid."""
        return {ref: str(err) for ref, err in self._invalid.items()}

    # ------------------------------------------------------------------ informer handlers

    def on_node_policy(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if self._on_object("GPUNodePolicy", kind, obj):
            self._rebuild()

    def on_cluster_policy(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if self._on_object("ClusterGPUPolicy", kind, obj):
            self._rebuild()

    def on_class(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self._on_object("GPUClass", kind, obj)
        self._merge_class(_name(obj))

    def on_woolyai_node_policy(
        self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        if self._on_object(KIND_NODE_POLICY, kind, obj):
            self._rebuild()

    def on_woolyai_cluster_policy(
        self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        if self._on_object(KIND_CLUSTER, kind, obj):
            self._rebuild()

    def on_woolyai_class(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self._on_object(KIND_CLASS, kind, obj)
        self._merge_class(_name(obj))

    def _merge_class(self, name: str) -> None:
        """The class in use under ``name``: gpusched's if it has one, else WoolyAI's; a
        WoolyAI class it hides is told once (a Warning Event) while hidden. O(1)."""
        own = self._own_classes.get(name)
        woolyai = self._woolyai_classes.get(name)
        chosen = own if own is not None else woolyai
        if chosen is None:
            self._classes.pop(name, None)
        else:
            self._classes[name] = chosen
        ref = _ref(KIND_CLASS, name)
        if own is None or woolyai is None:
            self._told_shadowed.discard(ref)
            return
        if ref in self._told_shadowed:
            return
        self._told_shadowed.add(ref)
        message = (
            f"{ref} is not used: GPUClass/{name} (gpusched.io) has the same name and pods "
            "asking for it get gpusched's; delete one of them, or rename WoolyAI's and the "
            "pods' cuda.scheduler.io/gpu-class"
        )
        log.warning("%s", message)
        obj = self._objects.get(ref)
        if self._event is not None and obj is not None:
            self._event(obj, "Warning", REASON_SHADOWED, _ACTION, message)

    def on_node(self, name: str, labels: Mapping[str, str] | None) -> None:
        """A node was added or changed (its ``labels``), or deleted (``None``). O(1) when its
        labels did not change; else one memoised resolution."""
        if labels is None:
            if self._labels.pop(name, None) is not None:
                self._effective.pop(name, None)
                if self._sent.pop(name, None) is not None:
                    self._set_node_policy(name, None)
                self.dirty.set()
            return
        if self._labels.get(name) == labels:
            return  # a heartbeat, or a change elsewhere
        self._labels[name] = dict(labels)
        # A new node, or new limits or matches, change the reports; any label, a class's.
        if self._resolve(name) or self._classes:
            self.dirty.set()

    def on_inventory(self, name: str, gpus: Sequence[GPUDevice] | None) -> None:
        """A node's GPUs (its inventory's ``gpus``; ``None``: it has none). O(GPUs)."""
        new = tuple(gpus or ())
        if self._gpus.get(name, ()) == new:
            return  # telemetry, or nothing a class reads
        if new:
            self._gpus[name] = new
        else:
            self._gpus.pop(name, None)
        if self._classes:
            self.dirty.set()

    def _on_object(self, kind: str, event: str, obj: dict[str, Any]) -> bool:
        """Store or drop the object; ``True`` when what resolution reads changed."""
        name = _name(obj)
        ref = _ref(kind, name)
        stores: dict[str, dict[str, Any]] = {
            "GPUNodePolicy": self._node_policies,
            "ClusterGPUPolicy": self._cluster_policies,
            "GPUClass": self._own_classes,
            KIND_NODE_POLICY: self._woolyai_node_policies,
            KIND_CLUSTER: self._woolyai_cluster_policies,
            KIND_CLASS: self._woolyai_classes,
        }
        store = stores[kind]
        before = store.get(name)
        if event == "DELETED":
            self._objects.pop(ref, None)
            self._invalid.pop(ref, None)
            self._told.pop(ref, None)
            self._told_invalid.pop(ref, None)
            store.pop(name, None)
            self.dirty.set()
            return before is not None
        # A list's items may lack their type (the API server's lists of built-in kinds do):
        # the Events about the object need it.
        wire_kind, api_version = _WIRE_KIND.get(kind, (kind, API_VERSION))
        obj = {**obj, "apiVersion": obj.get("apiVersion") or api_version, "kind": wire_kind}
        self._objects[ref] = obj
        parse = parse_woolyai_object if kind in _WIRE_KIND else parse_policy_object
        try:
            # Without the status: it is our output, not the spec (another version's status
            # fields must not make the object invalid).
            parsed = parse({k: v for k, v in obj.items() if k != "status"})
        except PolicyError as err:
            self._invalid[ref] = err
            store.pop(name, None)
            self._report_invalid(ref, obj, err)
            self.dirty.set()
            return before is not None
        self._invalid.pop(ref, None)
        self._told_invalid.pop(ref, None)
        changed = before is None or before.spec != parsed.spec
        store[name] = parsed
        if before is None or changed or before.metadata.generation != parsed.metadata.generation:
            self.dirty.set()  # the status's observedGeneration
        return changed

    def _report_invalid(self, ref: str, obj: Mapping[str, Any], err: PolicyError) -> None:
        meanwhile = (
            "pods asking for this class are not placed"
            if ref.startswith(("GPUClass/", f"{KIND_CLASS}/"))
            else "the scheduler uses the other policies and the built-in defaults"
        )
        message = f"{ref} is ignored until fixed: {'; '.join(err.problems)} ({meanwhile} meanwhile)"
        if self._told_invalid.get(ref) == message:
            return
        self._told_invalid[ref] = message
        log.warning("%s", message)
        if self._event is not None:
            self._event(obj, "Warning", REASON_INVALID, _ACTION, message)

    # ------------------------------------------------------------------ resolution

    def _rebuild(self) -> None:
        """A policy changed: a new resolver, every node resolved again. O(nodes) plus one
        resolution per distinct combination of selected label values."""
        cluster, _ignored = select_cluster_policy(self._cluster_policies.values())
        woolyai, _ = select_cluster_policy(self._woolyai_cluster_policies.values())
        self.resolver = PolicyResolver(
            [*self._node_policies.values(), *self._woolyai_node_policies.values()],
            cluster,
            woolyai,
        )
        for name in self._labels:
            self._resolve(name)
        self.dirty.set()

    def _resolve(self, name: str) -> bool:
        """Resolve one node; tell the cache if its limits changed. ``True`` if the effective
        policy (limits, sources, matches) changed."""
        effective = self.resolver.resolve(self._labels[name])
        previous = self._effective.get(name)
        self._effective[name] = effective
        wanted = sharing_policy(effective)
        sent = self._sent.get(name)
        if wanted == DEFAULT_POLICY:
            if sent is not None:
                del self._sent[name]
                self._set_node_policy(name, None)
        elif wanted != sent:
            self._sent[name] = wanted
            self._set_node_policy(name, wanted)
        return previous != effective

    # ------------------------------------------------------------------ reports, Events, status

    def flush(self) -> list[StatusWrite]:
        """Compute the reports, put an Event on each policy whose override changed, and return
        the status every policy object should have, written or not. O(nodes x P)."""
        self.dirty.clear()
        self.reports = policy_reports(self.resolver, self._labels)
        for ref, report in self.reports.items():
            if not report.overridden:
                self._told.pop(ref, None)
                continue
            message = report.message()
            if self._told.get(ref) == message:
                continue
            self._told[ref] = message
            obj = self._objects.get(ref)
            log.info("%s", message)
            if self._event is not None and obj is not None:
                self._event(obj, "Warning", REASON_OVERRIDDEN, _ACTION, message)
        return [w for ref in sorted(self._objects) if (w := self._status(ref)) is not None]

    def _status(self, ref: str) -> StatusWrite | None:
        obj = self._objects[ref]
        kind, _, name = ref.partition("/")
        if kind in WOOLYAI_PLURALS:
            return None  # WoolyAI's CRDs have no status: Events only
        generation = _generation(obj)
        old = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or ()}
        now = self._clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")

        def cond(type_: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
            status = "True" if ok else "False"
            prev = old.get(type_) or {}
            since = prev.get("lastTransitionTime") if prev.get("status") == status else None
            out: dict[str, Any] = {
                "type": type_,
                "status": status,
                "lastTransitionTime": since or now,
                "reason": reason,
                "message": message[:32768],
            }
            if generation is not None:
                out["observedGeneration"] = generation
            return out

        status: dict[str, Any] = {}
        if generation is not None:
            status["observedGeneration"] = generation
        err = self._invalid.get(ref)
        if err is not None:
            type_ = CONDITION_MATCHED if kind == "GPUClass" else CONDITION_APPLIED
            text = f"ignored until fixed: {'; '.join(err.problems)}"
            status["conditions"] = [cond(type_, False, REASON_INVALID, text)]
        elif kind == "GPUClass":
            status.update(self._class_status(self._own_classes[name], cond))
        elif kind == "ClusterGPUPolicy" and name != CLUSTER_POLICY_NAME:
            status["matchingNodes"] = 0
            status["conditions"] = [
                cond(
                    CONDITION_APPLIED,
                    False,
                    "NotDefault",
                    f"only the ClusterGPUPolicy named {CLUSTER_POLICY_NAME!r} applies; rename "
                    f"this one to {CLUSTER_POLICY_NAME!r} or merge its fields into it",
                )
            ]
        else:
            report = self.reports.get(ref) or PolicyReport(ref)
            status["matchingNodes"] = report.matching_nodes
            if report.applied:
                applied = cond(
                    CONDITION_APPLIED,
                    True,
                    "Applied",
                    f"decides at least one field on {report.applied_nodes} of its "
                    f"{report.matching_nodes} nodes",
                )
            elif report.matching_nodes == 0:
                applied = cond(
                    CONDITION_APPLIED,
                    False,
                    "NoMatchingNodes",
                    "no node matches the nodeSelector; check the node labels it names",
                )
            else:
                applied = cond(
                    CONDITION_APPLIED,
                    False,
                    "NotApplied",
                    f"decides no field on its {report.matching_nodes} nodes: it sets none, or "
                    "other policies win every field it sets",
                )
            status["conditions"] = [applied]
            if kind == "GPUNodePolicy":
                status["conditions"].append(
                    cond(
                        CONDITION_OVERRIDDEN,
                        report.overridden,
                        "Overridden" if report.overridden else "NotOverridden",
                        report.message(),
                    )
                )
        if self._shown(obj, status):
            return None
        return StatusWrite(kind, name, status)

    def _class_status(
        self, cls: GPUClass, cond: Callable[[str, bool, str, str], dict[str, Any]]
    ) -> dict[str, Any]:
        nodes = gpus = 0
        misses: Counter[str] = Counter()
        for node in sorted(self._labels):
            match = match_class(cls, self._labels[node], self._gpus.get(node, ()))
            if match.matched:
                nodes += 1
                gpus += len(match.mig_devices) if cls.spec.mig_profiles else len(match.gpu_indices)
            else:
                misses[match.reason] += 1
        if nodes:
            matched = cond(
                CONDITION_MATCHED,
                True,
                "Matched",
                f"{_count(gpus, 'GPU')} of the class on {_count(nodes, 'node')}",
            )
        else:
            why = "; ".join(f"{_count(n, 'node')}: {r}" for r, n in misses.most_common(3))
            matched = cond(
                CONDITION_MATCHED,
                False,
                "NoMatchingGPUs",
                f"no node has a GPU of the class ({why or 'there are no nodes'}); pods asking "
                "for it stay pending until one has: check products, minVramMiB, migProfiles "
                "and nodeSelector against the nodes' GPUs",
            )
        return {"matchingNodes": nodes, "matchingGPUs": gpus, "conditions": [matched]}

    @staticmethod
    def _shown(obj: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
        """Whether the object already has ``status`` (what a merge patch would set)."""
        have = obj.get("status") or {}
        return all(have.get(k) == v for k, v in status.items())

    async def run(self, kube: Kube) -> None:
        """Until cancelled: after each change, once changes have been quiet for ``debounce``
        seconds, :meth:`flush` and write the statuses that differ. A failed write is logged
        and tried again after ``retry`` seconds; one for a deleted object is dropped."""
        while True:
            await self.dirty.wait()
            while True:  # debounce: wait until a whole period passes without a change
                self.dirty.clear()
                await self._clock.sleep(self.debounce)
                if not self.dirty.is_set():
                    break
            failed = False
            for write in self.flush():
                try:
                    await kube.patch(write.path, {"status": write.status})
                except APINotFound:
                    continue  # deleted meanwhile (or the CRD has no status): nothing to say
                except APIForbidden as exc:
                    if not self._forbidden_told:  # told once; tried again at the next change
                        self._forbidden_told = True
                        log.warning(
                            "may not write the status of %s/%s (%s): policies still apply, "
                            "but their status does not say so; grant patch on %s/status "
                            "(deploy/scheduler/rbac.yaml)",
                            write.kind,
                            write.name,
                            exc.message,
                            PLURALS[write.kind],
                        )
                except APIError as exc:
                    failed = True
                    log.warning(
                        "could not write the status of %s/%s: %s; retrying in %.0fs",
                        write.kind,
                        write.name,
                        exc,
                        self.retry,
                    )
            if failed:
                await self._clock.sleep(self.retry)
                self.dirty.set()
