"""Leader election with a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

For active/passive replicas (``--leader-elect``): candidates try to acquire one Lease; the
holder renews it every ``retry_period``; a candidate takes it over once it has observed the
same ``renewTime`` for ``lease_duration`` on its own clock (never comparing clocks across
machines, as client-go). A leader that cannot renew within ``renew_deadline`` stops leading,
so it steps down before anyone can take over. Defaults are kube-scheduler's: 15 s, 10 s, 2 s.

Writes use the Lease's resourceVersion, so two candidates can never both believe they hold it
after a successful write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from gpusched.clock import Clock, RealClock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict, APIError, APINotFound

__all__ = ["LeaderElectionConfig", "LeaderElector"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderElectionConfig:
    namespace: str = "gpusched-system"
    name: str = "gpusched"
    lease_duration: float = 15.0
    """Seconds a non-leader waits after the last observed renewal before taking over."""
    renew_deadline: float = 10.0
    """Seconds the leader keeps trying to renew before it gives up leading."""
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
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._path = resource_path(
            "coordination.k8s.io", "v1", "leases", self.config.namespace, self.config.name
        )

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Acquire, then run ``lead()`` while renewing; return when leadership is lost.

        ``lead`` is cancelled when renewal fails; if it returns, leadership is released.
        """
        while not await self.try_acquire_or_renew():
            await self.clock.sleep(self.config.retry_period)
        log.info("%s: became leader of %s", self.identity, self._path)
        task: asyncio.Task[None] = asyncio.create_task(lead(), name="leader-work")
        renewed_at = self.clock.monotonic()
        try:
            while True:
                await self._sleep_or_done(task)
                if task.done():
                    break
                if await self.try_acquire_or_renew():
                    renewed_at = self.clock.monotonic()
                elif self.clock.monotonic() - renewed_at >= self.config.renew_deadline:
                    log.error("%s: could not renew the lease in time; stepping down", self.identity)
                    break
        finally:
            self.is_leader = False
            if not task.done():
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _sleep_or_done(self, task: asyncio.Task[None]) -> None:
        sleeper = asyncio.create_task(self.clock.sleep(self.config.retry_period))
        try:
            await asyncio.wait({task, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            await asyncio.gather(sleeper, return_exceptions=True)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go's tryAcquireOrRenew); True when this candidate leads."""
        now = _micro(self.clock)
        try:
            lease: dict[str, Any] = await self.kube.get(self._path)
        except APINotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.config.name, "namespace": self.config.namespace},
                "spec": self._spec(now, now, 0),
            }
            try:
                await self.kube.create(self._path.rsplit("/", 1)[0], body)
            except APIError as exc:
                log.info("%s: could not create the lease: %s", self.identity, exc)
                return self._lose()
            return self._win()
        except APIError as exc:
            log.warning("%s: reading the lease: %s", self.identity, exc)
            return self._lose()
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
        try:
            await self.kube.replace(self._path, lease)
        except APIConflict:
            return self._lose()
        except APIError as exc:
            log.warning("%s: renewing the lease: %s", self.identity, exc)
            return self._lose()
        return self._win()

    def _spec(self, acquired: str, renewed: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.config.lease_duration),
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
