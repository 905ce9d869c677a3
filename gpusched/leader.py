"""Leader election with a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

For active/passive replicas (``--leader-elect``): candidates try to acquire one Lease; the
holder renews it every ``retry_period``; a candidate takes it over once it has observed the
same ``renewTime`` for ``lease_duration`` on its own clock (never comparing clocks across
machines, as client-go). A leader that cannot renew within ``renew_deadline`` stops leading,
so it steps down before anyone can take over. Defaults are kube-scheduler's: 15 s, 10 s, 2 s.

When a leader stops (its work ends, fails or is cancelled for a graceful shutdown, or it
loses the Lease) it first waits for its work to stop, then *releases* the Lease if the Lease
still names it, as client-go does with ``ReleaseOnCancel`` (kube-scheduler sets it): it
clears ``holderIdentity``, so a standby takes over at its next attempt instead of waiting
``lease_duration``. Releasing is best effort: if it fails, the Lease simply expires.

Writes use the Lease's resourceVersion, so two candidates can never both believe they hold it
after a successful write.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from gpusched.clock import Clock, RealClock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict, APIError, APINotFound

__all__ = ["LeaderElectionConfig", "LeaderElector", "LeadershipLost"]

log = logging.getLogger(__name__)


class LeadershipLost(Exception):
    """The leader could not renew its Lease within ``renew_deadline`` and stopped leading.

    A process should exit on it (kube-scheduler exits 1, "leaderelection lost") so that it is
    restarted as a fresh candidate with empty caches.
    """


@dataclass(frozen=True)
class LeaderElectionConfig:
    namespace: str = "gpusched-system"
    name: str = "gpusched"
    lease_duration: float = 15.0
    """Seconds a non-leader waits after the last observed renewal before taking over. The
    Lease stores whole seconds: a fraction is rounded up."""
    renew_deadline: float = 10.0
    """Seconds the leader keeps trying to renew before it gives up leading; also the timeout
    of each request that releases the Lease."""
    retry_period: float = 2.0
    """Seconds between attempts to acquire or renew."""


def _micro(clock: Clock) -> str:
    return clock.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        identity: str,
        config: LeaderElectionConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.kube = kube
        self.identity = identity
        self.config = config or LeaderElectionConfig()
        self.clock = clock or RealClock()
        self.is_leader = False
        self.lease_readable = False
        """True when the last attempt read the Lease (or found there is none): this candidate
        knows who leads and can take over. False before the first attempt."""
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._may_hold = False  # a write that names us may have landed since the last release
        self._path = resource_path(
            "coordination.k8s.io", "v1", "leases", self.config.namespace, self.config.name
        )

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Acquire the Lease, then run ``lead()`` while renewing it, until one of them ends.

        - ``lead()`` returns: ``run`` returns.
        - ``lead()`` raises: ``run`` raises the same exception.
        - The Lease cannot be renewed for ``renew_deadline``: ``lead()`` is cancelled and
          ``LeadershipLost`` is raised.
        - ``run`` is cancelled (a graceful stop): ``lead()`` is cancelled and the cancellation
          propagates.

        In every case ``lead()`` has finished before ``run`` ends, and then the Lease is
        released if it still names this candidate (see ``release``), so a standby takes over
        at once and never while ``lead()`` still runs.
        """
        task: asyncio.Task[None] | None = None
        try:
            while not await self.try_acquire_or_renew():
                await self.clock.sleep(self.config.retry_period)
            log.info("%s: became leader of %s", self.identity, self._path)
            task = asyncio.create_task(lead(), name="leader-work")
            renewed_at = self.clock.monotonic()
            while True:
                await self._sleep_or_done(task)
                if task.done():
                    break
                # As client-go, the renewal is bounded by what is left of renewDeadline: a
                # request that hangs must not keep a leader believing it leads after a
                # standby may have taken over.
                left = self.config.renew_deadline - (self.clock.monotonic() - renewed_at)
                if await self.try_acquire_or_renew(timeout=max(left, 0.001)):
                    renewed_at = self.clock.monotonic()
                elif self.clock.monotonic() - renewed_at >= self.config.renew_deadline:
                    raise LeadershipLost(
                        f"{self.identity}: could not renew the Lease {self._path} within "
                        f"renewDeadline ({self.config.renew_deadline:g}s)"
                    )
            task.result()  # lead()'s exception, if it raised
        finally:
            self.is_leader = False
            if task is not None:
                task.cancel()  # no-op when it has finished
                await asyncio.gather(task, return_exceptions=True)
            if self._may_hold:
                await self.release()

    async def _sleep_or_done(self, task: asyncio.Task[None]) -> None:
        sleeper = asyncio.create_task(self.clock.sleep(self.config.retry_period))
        try:
            await asyncio.wait({task, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            await asyncio.gather(sleeper, return_exceptions=True)

    async def release(self) -> bool:
        """Give up the Lease if it still names this candidate (client-go's ``release``).

        Call it only once this candidate has stopped leading. As client-go, it writes the
        Lease with ``holderIdentity`` cleared, ``leaseDurationSeconds`` 1, ``acquireTime`` and
        ``renewTime`` now and ``leaseTransitions`` kept, under the resourceVersion just read,
        so it never clears a Lease another candidate has taken meanwhile. Best effort: True if
        it released the Lease; False if the Lease did not name this candidate or a request
        failed (logged; each request is given ``renew_deadline``).
        """
        self.is_leader = False
        timeout = self.config.renew_deadline
        try:
            lease: dict[str, Any] = await self.kube.request("GET", self._path, timeout=timeout)
        except APINotFound:
            self._may_hold = False
            return False
        except APIError as exc:
            log.error("%s: could not release the lease %s: %s", self.identity, self._path, exc)
            return False
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            self._may_hold = False
            return False
        now = _micro(self.clock)
        lease["spec"] = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0),
        }
        try:
            await self.kube.request("PUT", self._path, body=lease, timeout=timeout)
        except APIConflict:
            self._may_hold = False  # written by someone else since we read it: not ours
            log.info("%s: the lease %s changed hands while releasing it", self.identity, self._path)
            return False
        except APIError as exc:
            log.error("%s: could not release the lease %s: %s", self.identity, self._path, exc)
            return False
        self._may_hold = False
        log.info("%s: released the lease %s", self.identity, self._path)
        return True

    async def try_acquire_or_renew(self, timeout: float | None = None) -> bool:
        """One attempt (client-go's tryAcquireOrRenew); True when this candidate leads. Each
        request is given ``timeout`` seconds (default ``renew_deadline``)."""
        timeout = self.config.renew_deadline if timeout is None else timeout
        now = _micro(self.clock)
        try:
            lease: dict[str, Any] = await self.kube.request("GET", self._path, timeout=timeout)
        except APINotFound:
            self.lease_readable = True
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.config.name, "namespace": self.config.namespace},
                "spec": self._spec(now, now, 0),
            }
            self._may_hold = True
            try:
                await self.kube.request(
                    "POST", self._path.rsplit("/", 1)[0], body=body, timeout=timeout
                )
            except APIError as exc:
                log.info("%s: could not create the lease: %s", self.identity, exc)
                return self._lose()
            return self._win()
        except APIError as exc:
            self.lease_readable = False
            log.warning("%s: reading the lease: %s", self.identity, exc)
            return self._lose()
        self.lease_readable = True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        observed = (holder, spec.get("renewTime") or "")
        if observed != self._observed:
            self._observed = observed
            self._observed_at = self.clock.monotonic()
        expired = self.clock.monotonic() - self._observed_at >= float(
            spec.get("leaseDurationSeconds") or self.config.lease_duration
        )
        if holder and holder != self.identity and not expired:
            return self._lose()
        transitions = int(spec.get("leaseTransitions") or 0)
        acquired = spec.get("acquireTime") or now
        if holder != self.identity:
            transitions += 1
            acquired = now
        lease["spec"] = self._spec(acquired, now, transitions)
        self._may_hold = True
        try:
            await self.kube.request("PUT", self._path, body=lease, timeout=timeout)
        except APIConflict:
            return self._lose()
        except APIError as exc:
            log.warning("%s: renewing the lease: %s", self.identity, exc)
            return self._lose()
        return self._win()

    def _spec(self, acquired: str, renewed: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            # Whole seconds, rounded up: truncating (client-go's int(d / time.Second)) would
            # let a standby take over before the leader's renew_deadline (< lease_duration)
            # has passed, and would write 0 for a sub-second duration.
            "leaseDurationSeconds": math.ceil(self.config.lease_duration),
            "acquireTime": acquired,
            "renewTime": renewed,
            "leaseTransitions": transitions,
        }

    def _win(self) -> bool:
        self.is_leader = True
        return True

    def _lose(self) -> bool:
        self.is_leader = False
        return False
