"""A reflector: keep a local copy of one resource equal to the server's, whatever happens.

The protocol is client-go's: list (in pages) to get the state and its resourceVersion, then
watch from that resourceVersion with bookmarks; when the stream ends (server timeout, a cut
connection) re-watch from the last resourceVersion seen; when the server answers 410 Gone the
window was missed, so list again and diff against the local copy, emitting the deletions that
happened while we were away. Transport and 5xx errors back off exponentially with jitter.

An ``optional`` reflector is for a resource the cluster may not serve (a CRD not installed, or
no permission to list it): a 404 or 403 on a list logs one warning, counts as synced with no
objects (those it had are deleted, as the CRD's removal deletes them), and is retried quietly
every ``backoff_max`` seconds until the resource appears. Others retry such errors forever.

After any sequence of drops and 410s the local ``items`` equals a fresh list of the server, and
the handler has seen an event for every change of state between the two (possibly collapsed:
two updates missed during a gap arrive as one MODIFIED; an object deleted and created again
under the same name during a gap arrives as DELETED of the old one, then ADDED of the new).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any

from gpusched.clock import Clock, RealClock
from gpusched.kube.client import Kube
from gpusched.kube.errors import APIError, APIForbidden, APIGone, APINotFound

__all__ = ["Handler", "Reflector", "object_key"]

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any], dict[str, Any] | None], None]
"""``handler(event_type, obj, old)``: ADDED (old None), MODIFIED, DELETED (obj: last state)."""


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


class Reflector:
    def __init__(
        self,
        kube: Kube,
        path: str,
        *,
        handler: Handler | None = None,
        label_selector: str = "",
        field_selector: str = "",
        page_size: int = 500,
        clock: Clock | None = None,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        watch_timeout: int | None = None,
        name: str = "",
        optional: bool = False,
    ) -> None:
        self.kube = kube
        self.path = path
        self.handler = handler
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.clock = clock or RealClock()
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.watch_timeout = watch_timeout
        self.name = name or path
        self.optional = optional
        self.missing = False
        """Optional reflectors: the last list was answered 404 or 403 (module docstring)."""
        self.items: dict[str, dict[str, Any]] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.lists = 0
        self.watches = 0
        self.errors = 0

    def _selectors(self) -> dict[str, str]:
        q = {}
        if self.label_selector:
            q["labelSelector"] = self.label_selector
        if self.field_selector:
            q["fieldSelector"] = self.field_selector
        return q

    async def run(self) -> None:
        """List and watch until cancelled."""
        need_list = True
        delay = self.backoff_initial
        while True:
            try:
                if need_list:
                    await self.list()
                    need_list = False
                await self.watch_once()
                delay = self.backoff_initial
            except APIGone:
                log.info(
                    "%s: resourceVersion %s expired, re-listing", self.name, self.resource_version
                )
                need_list = True
            except APIError as exc:
                if self.optional and isinstance(exc, (APINotFound, APIForbidden)):
                    self._absent(exc)
                    need_list = True
                    await self.clock.sleep(self.backoff_max)
                    continue
                self.errors += 1
                wait = max(delay * random.uniform(0.8, 1.2), exc.retry_after)
                log.warning("%s: %s; retrying in %.2fs", self.name, exc, wait)
                await self.clock.sleep(wait)
                delay = min(delay * 2, self.backoff_max)

    def _absent(self, exc: APIError) -> None:
        """An optional resource is not served (or not ours to list): synced, and empty."""
        if not self.missing:
            self.missing = True
            log.warning(
                "%s: the API server answers %s to listing %s (%s): going on without it, as if "
                "there were none; to use it, install its CRD (gpusched's own and the gang "
                "kinds it reads are in deploy/crds; another project's come with it) and grant "
                "list and watch on it (deploy/scheduler/rbac.yaml)",
                self.name,
                exc.code,
                self.path,
                exc.message,
            )
        old, self.items, self.resource_version = self.items, {}, ""
        if self.handler is not None:
            for prev in old.values():
                self.handler("DELETED", prev, prev)
        self.synced.set()

    async def list(self) -> None:
        """Replace the local copy with a fresh paged list, emitting the differences."""
        fresh: dict[str, dict[str, Any]] = {}
        token = ""
        while True:
            query = self._selectors()
            query["limit"] = str(self.page_size)
            if token:
                query["continue"] = token
            try:
                page = await self.kube.get(self.path, query)
            except APIGone:
                if not token:
                    raise
                fresh, token = {}, ""  # the snapshot expired mid-list: start over
                continue
            for item in page.get("items") or ():
                fresh[object_key(item)] = item
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                rv = str(meta.get("resourceVersion", ""))
                break
        self.lists += 1
        if self.missing:
            self.missing = False
            log.info("%s: %s is served now", self.name, self.path)
        old = self.items
        self.items = fresh
        self.resource_version = rv
        if self.handler is not None:
            for key, obj in fresh.items():
                prev = old.get(key)
                if prev is None:
                    self.handler("ADDED", obj, None)
                elif prev["metadata"].get("uid") != obj["metadata"].get("uid"):
                    # Deleted and created again under the same name while we were not
                    # watching: two objects, as a watch would have shown them.
                    self.handler("DELETED", prev, prev)
                    self.handler("ADDED", obj, None)
                elif prev["metadata"].get("resourceVersion") != obj["metadata"].get(
                    "resourceVersion"
                ):
                    self.handler("MODIFIED", obj, prev)
            for key, prev in old.items():
                if key not in fresh:
                    self.handler("DELETED", prev, prev)
        self.synced.set()

    async def watch_once(self) -> None:
        """Watch from ``resource_version`` until the server ends the stream."""
        query = self._selectors()
        query["resourceVersion"] = self.resource_version
        query["allowWatchBookmarks"] = "true"
        timeout = self.watch_timeout or int(300 * (1 + random.random()))
        query["timeoutSeconds"] = str(timeout)
        self.watches += 1
        async for event in self.kube.watch(self.path, query):
            kind = event.get("type")
            obj = event.get("object") or {}
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if kind == "BOOKMARK":
                if rv:
                    self.resource_version = str(rv)
                continue
            if kind not in ("ADDED", "MODIFIED", "DELETED"):
                log.warning("%s: skipping unknown watch event type %r", self.name, kind)
                continue
            key = object_key(obj)
            old = self.items.get(key)
            if kind == "DELETED":
                self.items.pop(key, None)
            else:
                self.items[key] = obj
            if rv:
                self.resource_version = str(rv)
            if self.handler is not None:
                if kind == "DELETED":
                    self.handler("DELETED", obj, old)
                else:
                    self.handler("MODIFIED" if old is not None else "ADDED", obj, old)
