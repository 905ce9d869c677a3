"""``Status``: what a plugin says about a pod, instead of raising.

Mirrors kube-scheduler's ``Status`` and ``Code`` (staging/src/k8s.io/kube-scheduler/framework/
interface.go): a plugin that finds that a pod does not fit returns ``Unschedulable`` with a
human-readable reason; exceptions are for bugs and API failures (the framework turns one raised
by a plugin into an ``Error`` status naming the plugin).

Codes, as upstream (same order and values, so logs and metric labels carry over)::

    SUCCESS                         the plugin ran and the pod may go on
    ERROR                           internal failure; the pod goes to backoff, not "unschedulable"
    UNSCHEDULABLE                   does not fit; preemption (PostFilter) may help
    UNSCHEDULABLE_AND_UNRESOLVABLE  does not fit, and preemption would not change that
    WAIT                            Permit only: hold the pod until allowed, rejected or timed out
    SKIP                            PreFilter/PreScore: skip my Filter/Score; Bind: not my pod
    PENDING                         finished, but stop here and retry without backoff

Performance: ``Status`` is a frozen, slotted dataclass and ``SUCCESS`` is a shared singleton, so
the hot path (Filter and Score over every node) allocates nothing when a node fits. The code
``SUCCESS`` is ``0``, so ``if status.code:`` is the cheapest failure test. Plugins that reject
often should build their rejection statuses once, at import time, with ``plugin=NAME``:
``with_plugin`` then returns the same object and a rejected node costs no allocation either.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["SKIP", "SUCCESS", "Code", "Status", "StatusError"]

_LABELS = (
    "Success",
    "Error",
    "Unschedulable",
    "UnschedulableAndUnresolvable",
    "Wait",
    "Skip",
    "Pending",
)


class Code(enum.IntEnum):
    """A status code; values and ``str()`` labels are kube-scheduler's."""

    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5
    PENDING = 6

    @property
    def label(self) -> str:
        """Upstream's name (``"UnschedulableAndUnresolvable"``): the metrics' ``result`` label."""
        return _LABELS[self]

    def __str__(self) -> str:
        return _LABELS[self]


class StatusError(Exception):
    """The exception ``Status.as_error()`` makes for a failed status that carries none."""

    def __init__(self, status: Status) -> None:
        self.status = status
        super().__init__(status.message() or status.code.label)


@dataclass(frozen=True, slots=True)
class Status:
    """The result of running a plugin: a code, reasons, the plugin, and for errors the exception.

    Build one with the constructors (``Status.unschedulable("0/8 GPUs free", plugin=NAME)``);
    ``plugin`` may be left empty: the framework fills it in with ``with_plugin`` when it passes a
    plugin's status on. ``exception`` is named so (upstream: ``err``) because ``Status.error``
    is the constructor.
    """

    code: Code
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    exception: BaseException | None = None
    quiet: bool = False
    """PreEnqueue only (:meth:`waiting`): the pod waits for something already on its way;
    the scheduler logs it and writes no Event or condition, as upstream for PreEnqueue."""

    # -- constructors --------------------------------------------------------------------

    @classmethod
    def success(cls) -> Status:
        """The shared ``SUCCESS`` singleton (no allocation)."""
        return SUCCESS

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "") -> Status:
        """The pod does not fit; preemption (PostFilter) might make room."""
        return cls(Code.UNSCHEDULABLE, reasons, plugin)

    @classmethod
    def unresolvable(cls, *reasons: str, plugin: str = "") -> Status:
        """The pod does not fit and preemption would not help (``UnschedulableAndUnresolvable``)."""
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin)

    @classmethod
    def waiting(cls, *reasons: str, plugin: str = "") -> Status:
        """PreEnqueue: hold the pod back without telling its owner (no Event, no condition),
        for a wait that ends on its own in moments (a ResourceClaim its controller is about to
        create). Anything the user must act on is ``unresolvable`` instead, which is told."""
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin, quiet=True)

    @classmethod
    def error(cls, cause: BaseException | str, *, plugin: str = "") -> Status:
        """An internal failure: an exception, or a message when there is none."""
        if isinstance(cause, BaseException):
            return cls(Code.ERROR, (str(cause) or type(cause).__name__,), plugin, cause)
        return cls(Code.ERROR, (cause,), plugin)

    @classmethod
    def wait(cls, *reasons: str, plugin: str = "") -> Status:
        """Permit only: hold the pod (with the timeout returned beside this status)."""
        if not reasons and not plugin:
            return _WAIT
        return cls(Code.WAIT, reasons, plugin)

    @classmethod
    def skip(cls, *reasons: str, plugin: str = "") -> Status:
        """PreFilter/PreScore: skip this plugin's Filter/Score this cycle; Bind: not my pod."""
        if not reasons and not plugin:
            return SKIP
        return cls(Code.SKIP, reasons, plugin)

    @classmethod
    def pending(cls, *reasons: str, plugin: str = "") -> Status:
        """Scheduling succeeded but must stop here; the pod is retried without backoff."""
        return cls(Code.PENDING, reasons, plugin)

    # -- predicates ----------------------------------------------------------------------

    @property
    def is_success(self) -> bool:
        return self.code == Code.SUCCESS

    @property
    def is_rejected(self) -> bool:
        """Unschedulable, UnschedulableAndUnresolvable or Pending (as upstream's ``IsRejected``)."""
        return self.code in _REJECTED

    @property
    def is_error(self) -> bool:
        return self.code == Code.ERROR

    @property
    def is_wait(self) -> bool:
        return self.code == Code.WAIT

    @property
    def is_skip(self) -> bool:
        return self.code == Code.SKIP

    # -- derived -------------------------------------------------------------------------

    def message(self) -> str:
        """The reasons joined with ``", "`` (upstream's ``Message()``)."""
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        """This status attributed to ``plugin``; ``self`` (no copy) when it already is."""
        if self.plugin == plugin:
            return self
        return Status(self.code, self.reasons, plugin, self.exception, self.quiet)

    def as_error(self) -> BaseException | None:
        """The exception behind a failed status (made from the message if it has none).

        ``None`` for Success, Wait and Skip, as upstream's ``AsError``.
        """
        if self.code in _NOT_ERRORS:
            return None
        return self.exception if self.exception is not None else StatusError(self)

    def __str__(self) -> str:
        head = self.code.label if not self.plugin else f"{self.code.label} ({self.plugin})"
        message = self.message()
        return f"{head}: {message}" if message else head


_REJECTED = frozenset({Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING})
_NOT_ERRORS = frozenset({Code.SUCCESS, Code.WAIT, Code.SKIP})

SUCCESS = Status(Code.SUCCESS)
"""The shared success status: return it from Filter, Score and the rest."""

SKIP = Status(Code.SKIP)
"""The shared bare Skip status."""

_WAIT = Status(Code.WAIT)
