"""GPUCost: the cost-optimised strategy; cheaper GPUs score higher.

Where a node's price per GPU-hour comes from, the first that applies:

1. the node label ``gpusched.io/gpu-price`` (``priceLabel``), a decimal such as ``"2.49"``;
   a label that is not a non-negative decimal counts as no label, and is logged once with
   what to write instead;
2. the ``GPUClass`` price (``spec.price``): the class the pod asks for when it has a price
   and the node has GPUs of it, else the lowest price of the priced classes whose GPUs the
   node has (:func:`gpusched.gpu_policy.resolve.match_class`);
3. GPU_Orchestrator's ``gpu-orchestrator/cheap-node=true`` (``cheapLabel``; its
   ``costOptimized`` strategy prefers the nodes so labelled): no price, the node scores
   ``cheapScore`` (default 100, as cheap as it gets);
4. none of these: ``unpricedScore`` (default 0, ranked with the dearest, used last).

A price scores ``100 x (1 - min(price, maxPrice) / maxPrice)``, rounded: free is 100,
``maxPrice`` and above 0, linear between. The scale is absolute, not relative to the cycle's
other nodes (no NormalizeScore): a node's score is a function of the node, the classes and
the pod's class alone, so the plugin signs the pod (keeping equivalence-class batching) with
the pod's class and the priced classes' names and specs; a class edit changes the signature,
so a batched ranking never keeps a stale price. Set ``maxPrice`` to about the dearest GPU's
price in your currency to use the whole range.

Only the ranking matters, so the price is per GPU and not multiplied by the pod's count or
share. GPU-less pods score by the node like any other (weight the plugin only in a GPU
profile if that is unwanted).

Costs: SignPod and PreScore O(priced classes) per cycle (plus one request read per pod);
Score O(1) per node with a price label, else O(classes x GPUs) once per node and class set
(memoised by the node's labels and inventory), then O(1).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Self

from pydantic import Field

from gpusched.framework import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    SUCCESS,
    CycleState,
    Handle,
    PluginArgs,
    Pod,
    PreScorePlugin,
    ScorePlugin,
    SignPlugin,
    StateKey,
    Status,
)
from gpusched.gpu_policy.resolve import match_class
from gpusched.gpu_requests import RequestError, read_gpu_request

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo
    from gpusched.gpu_policy.models import GPUClass

__all__ = [
    "CHEAP_LABEL",
    "NAME",
    "PRICE_LABEL",
    "GPUCost",
    "GPUCostArgs",
    "parse_price",
    "price_score",
]

NAME: Final = "GPUCost"
PRICE_LABEL: Final = "gpusched.io/gpu-price"
CHEAP_LABEL: Final = "gpu-orchestrator/cheap-node"
"""GPU_Orchestrator's label (seed 002): ``"true"`` marks a cheap node."""

_log = logging.getLogger(__name__)
_MEMO_MAX: Final = 65536
"""Nodes whose class price is memoised before the memo is cleared."""


class GPUCostArgs(PluginArgs):
    """``pluginConfig`` args of GPUCost."""

    max_price: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    """Price per GPU-hour that scores 0 (and anything dearer); 0 scores 100, linear between.
    Default 10.0; set it near your dearest GPU's price."""
    price_label: str = Field(default=PRICE_LABEL, min_length=1)
    """Node label holding the price per GPU-hour, a decimal. Default ``gpusched.io/gpu-price``."""
    cheap_label: str = Field(default=CHEAP_LABEL, min_length=1)
    """Node label that, set to ``"true"``, marks an unpriced node cheap. Default
    ``gpu-orchestrator/cheap-node``."""
    cheap_score: int = Field(default=MAX_NODE_SCORE, ge=MIN_NODE_SCORE, le=MAX_NODE_SCORE)
    """Score of a node marked cheap that has no price. Default 100."""
    unpriced_score: int = Field(default=MIN_NODE_SCORE, ge=MIN_NODE_SCORE, le=MAX_NODE_SCORE)
    """Score of a node with no price and no cheap mark. Default 0."""


def parse_price(text: object) -> float | None:
    """A price label's value as a non-negative finite number, or ``None`` if it is not one."""
    if not isinstance(text, str):
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def price_score(price: float, max_price: float) -> int:
    """``100 x (1 - min(price, max_price) / max_price)``, rounded half up, in 0..100."""
    fraction = min(price, max_price) / max_price
    return int(MAX_NODE_SCORE * (1.0 - fraction) + 0.5)


@dataclass(frozen=True, slots=True)
class _Prices:
    """What Score reads, written by PreScore: the pod's class and the priced classes."""

    pod_class: str | None
    classes: tuple[GPUClass, ...]
    key: Hashable


_PRICES: Final = StateKey[_Prices]("PreScoreGPUCost")


class GPUCost(PreScorePlugin, ScorePlugin, SignPlugin):
    """Cheaper nodes (price label, GPUClass price, cheap label) score higher."""

    NAME = NAME
    ARGS = GPUCostArgs

    def __init__(self, args: GPUCostArgs | None = None, handle: Handle | None = None) -> None:
        self._args = args or GPUCostArgs()
        self._handle = handle
        self._classes_memo: tuple[tuple[GPUClass, ...], Hashable] = ((), ())
        self._pod_memo: tuple[object, str | None] | None = None
        self._node_memo: dict[str, tuple[object, object, Hashable, dict[str | None, float]]] = {}
        self._bad_labels: set[tuple[str, str]] = set()

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(args if isinstance(args, GPUCostArgs) else None, handle)

    # -- what the score depends on ----------------------------------------------------------

    def _priced(self) -> tuple[tuple[GPUClass, ...], Hashable]:
        """The priced classes by name, and a hashable key of them (names and specs). O(classes);
        the key is rebuilt only when the class objects change."""
        classes: Mapping[str, GPUClass] = self._handle.gpu_classes if self._handle else {}
        priced = tuple(
            sorted((c for c in classes.values() if c.spec.price is not None), key=lambda c: c.name)
        )
        memo_objs, memo_key = self._classes_memo
        if len(priced) == len(memo_objs) and all(
            a is b for a, b in zip(priced, memo_objs, strict=True)
        ):
            return memo_objs, memo_key
        key = tuple((c.name, c.spec.model_dump_json()) for c in priced)
        self._classes_memo = (priced, key)
        self._node_memo.clear()
        return priced, key

    def _pod_class(self, pod: Pod) -> str | None:
        """The GPUClass the pod asks for (any request form), memoised for the last pod object;
        ``None`` for none or an unreadable request (GPUFit rejects those)."""
        memo = self._pod_memo
        if memo is not None and memo[0] is pod:
            return memo[1]
        claims = self._handle.claim_specs if self._handle is not None else None
        try:
            request = read_gpu_request(pod, claims)
        except (RequestError, TypeError, AttributeError, ValueError):
            request = None
        name = request.gpu_class if request is not None else None
        self._pod_memo = (pod, name)
        return name

    def _prices(self, pod: Pod) -> _Prices:
        classes, key = self._priced()
        return _Prices(self._pod_class(pod) if classes else None, classes, key)

    # -- extension points -------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        state.write(_PRICES, self._prices(pod))
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        args = self._args
        labels = node_info.labels
        raw = labels.get(args.price_label)
        if raw is not None:
            price = parse_price(raw)
            if price is not None:
                return price_score(price, args.max_price), SUCCESS
            self._warn_label(node_info.name, raw)
        prices = state.get(_PRICES)
        if prices is None:  # PreScore disabled for this plugin
            prices = self._prices(pod)
        if prices.classes:
            price = self._class_price(node_info, prices)
            if price is not None:
                return price_score(price, args.max_price), SUCCESS
        if labels.get(args.cheap_label) == "true":
            return args.cheap_score, SUCCESS
        return args.unpriced_score, SUCCESS

    def sign_pod(self, pod: Pod) -> Hashable:
        """The pod's GPUClass and the priced classes' names and specs (Score reads nothing else
        of the pod); ``()`` when no class has a price."""
        prices = self._prices(pod)
        return (prices.pod_class, prices.key) if prices.classes else ()

    # -- helpers ----------------------------------------------------------------------------

    def _class_price(self, node_info: NodeInfo, prices: _Prices) -> float | None:
        """The node's price from the classes: the pod's class's when priced and the node has
        its GPUs, else the lowest price of the priced classes it has GPUs of."""
        inventory = node_info.ledger.inventory
        if inventory is None:
            return None
        labels, gpus = node_info.labels, inventory.gpus
        memo = self._node_memo.get(node_info.name)
        if memo is not None and memo[0] is labels and memo[1] is gpus and memo[2] is prices.key:
            found = memo[3]
        else:
            found = {}
            for cls in prices.classes:
                if cls.spec.price is not None and match_class(cls, labels, gpus).matched:
                    found[cls.name] = cls.spec.price
            if found:
                found[None] = min(found.values())
            if len(self._node_memo) >= _MEMO_MAX:
                self._node_memo.clear()
            self._node_memo[node_info.name] = (labels, gpus, prices.key, found)
        if prices.pod_class is not None and prices.pod_class in found:
            return found[prices.pod_class]
        return found.get(None)

    def _warn_label(self, node: str, raw: object) -> None:
        key = (node, str(raw))
        if key in self._bad_labels:
            return
        if len(self._bad_labels) >= _MEMO_MAX:
            self._bad_labels.clear()
        self._bad_labels.add(key)
        _log.warning(
            "node %s: label %s=%r is not a price; write a non-negative decimal per GPU-hour "
            'such as "2.49" (the node is scored as unpriced until then)',
            node,
            self._args.price_label,
            raw,
        )
