"""The scheduler cache: nodes, bound and assumed pods, GPU device ledgers, per-cycle snapshots.

Modelled on kube-scheduler's ``pkg/scheduler/backend/cache`` and ``framework.NodeInfo``:

- :mod:`~gpusched.cache.resources`: :class:`Resources`, integer amounts of a node's allocatable
  and a pod's effective requests;
- :mod:`~gpusched.cache.ledger`: :class:`NodeLedger`, which pod holds which GPU or MIG device
  on a node, built from its ``GPUNodeInventory`` (or anonymous GPUs);
- :mod:`~gpusched.cache.nodeinfo`: :class:`NodeInfo` and :class:`PodInfo`, one node's
  aggregate state;
- :mod:`~gpusched.cache.cache`: :class:`SchedulerCache`, the assume/confirm/expire state
  machine fed by informers and the scheduler;
- :mod:`~gpusched.cache.snapshot`: :class:`Snapshot`, what one scheduling cycle reads;
- :mod:`~gpusched.cache.nominations`: :class:`Nominee`, the GPUs a node keeps for a pod
  preemption nominated to it;
- :mod:`~gpusched.cache.errors`: :class:`CacheError` and :class:`LedgerError`.

Who calls what, when:

- informers: ``add_node`` / ``update_node`` / ``remove_node`` for Nodes; ``set_inventory``
  for ``GPUNodeInventory`` objects (parsed with :func:`gpusched.inventory.inventory_from_object`;
  ``None`` on delete); ``add_pod`` / ``update_pod`` / ``remove_pod`` for pods with
  ``spec.nodeName`` set;
- scheduling cycle: ``update_snapshot(snapshot)`` first, then plugins read only the snapshot;
  on a decision ``assume_pod(pod, node, assignment)``; when PostFilter nominates a node,
  ``nominate(pod, node)`` (cleared by the assume, the bound pod's Add, or
  ``clear_nomination(uid)`` when the pending pod is deleted);
- binding cycle: ``forget_pod(pod)`` on any failure (Unreserve), ``finish_binding(pod)`` when
  it is over, whatever the outcome;
- a task: ``run_cleanup()`` (or ``cleanup_expired_assumed_pods()`` every second).
"""

from gpusched.cache.cache import (
    DEFAULT_ASSUMED_TTL,
    TERMINAL_PHASES,
    ClaimedDevicesSource,
    ClaimedSetter,
    SchedulerCache,
)
from gpusched.cache.errors import CacheError, LedgerError
from gpusched.cache.ledger import (
    DEFAULT_POLICY,
    EXCLUSIVE_ONLY,
    MIG_RESOURCE_PREFIX,
    MIG_UUID_PREFIX,
    REFUSAL_KINDS,
    GPUDevice,
    MIGInstance,
    NodeLedger,
    SharingPolicy,
    mib_text,
)
from gpusched.cache.nodeinfo import NodeInfo, PodInfo, next_generation, pod_uid
from gpusched.cache.nominations import NO_NEED, GPUNeed, Nominee, gpu_need, leaves_room
from gpusched.cache.resources import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    Resources,
    node_allocatable,
    pod_requests,
)
from gpusched.cache.snapshot import Snapshot

__all__ = [
    "CPU",
    "DEFAULT_ASSUMED_TTL",
    "DEFAULT_POLICY",
    "EPHEMERAL_STORAGE",
    "EXCLUSIVE_ONLY",
    "MEMORY",
    "MIG_RESOURCE_PREFIX",
    "MIG_UUID_PREFIX",
    "NO_NEED",
    "PODS",
    "REFUSAL_KINDS",
    "TERMINAL_PHASES",
    "CacheError",
    "ClaimedDevicesSource",
    "ClaimedSetter",
    "GPUDevice",
    "GPUNeed",
    "LedgerError",
    "MIGInstance",
    "NodeInfo",
    "NodeLedger",
    "Nominee",
    "PodInfo",
    "Resources",
    "SchedulerCache",
    "SharingPolicy",
    "Snapshot",
    "gpu_need",
    "leaves_room",
    "mib_text",
    "next_generation",
    "node_allocatable",
    "pod_requests",
    "pod_uid",
]
