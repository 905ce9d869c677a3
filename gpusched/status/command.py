"""``gpusched status``: list the cluster once (or follow it) and print the GPUs.

Read-only: ``list`` (and ``watch`` with ``--watch``) on nodes, pods and
``gpunodeinventories.gpusched.io``, and, where the cluster serves DRA and the reader may list
them, ``resourceclaims`` and ``resourceslices`` (``resource.k8s.io/v1``: the GPUs claims hold);
nothing else. **Cost: one LIST per kind** (paged by 500, pods filtered by the server to
unfinished ones with ``status.phase!=Succeeded,!=Failed``), the first three at once, then the
DRA two; ``--watch`` then keeps one watch per kind open from the list's resourceVersion
and re-renders on each event whose change shows (a 410 Gone re-lists that kind alone, as
client-go does); nothing polls. The model is rebuilt from the local copies on each event,
O(nodes x GPUs + pods).

The kubeconfig is found as kubectl finds it: ``--kubeconfig``, else ``$KUBECONFIG`` (a
colon-separated list, merged), else ``~/.kube/config`` when it exists, else the in-cluster
service account. Exit status: 0 shown (or ``--watch`` ended by Ctrl-C / SIGTERM); 1 when the
cluster cannot be read (unreachable, credentials refused, forbidden, no GPUNodeInventory CRD),
with a message saying what to do; 2 for a bad kubeconfig or context.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from gpusched.inventory import API_GROUP, CRD_NAME, PLURAL, VERSION
from gpusched.kube.client import Kube, KubeconfigError, connect, resource_path
from gpusched.kube.client import resolve_kubeconfig as client_resolve_kubeconfig
from gpusched.kube.errors import APIError, APIForbidden, APIGone, APINotFound
from gpusched.kube.reflector import Reflector
from gpusched.status.model import POOL_LABELS, ClusterStatus, Memo, build_status
from gpusched.status.render import Output, render

__all__ = [
    "StatusError",
    "StatusOptions",
    "collect",
    "main",
    "resolve_kubeconfig",
    "run",
    "use_color",
]

log = logging.getLogger(__name__)

UNFINISHED: Final = "status.phase!=Succeeded,status.phase!=Failed"
"""Field selector of the pods list and watch: finished pods hold no GPU."""
DRA_GROUP: Final = "resource.k8s.io"
DRA_VERSION: Final = "v1"
NEEDED_ACCESS: Final = (
    "gpusched status needs get, list and watch on nodes, pods and "
    "gpunodeinventories.gpusched.io (a read-only ClusterRole: docs/status.md)"
)
_CLEAR: Final = "\x1b[H\x1b[2J"


class StatusError(Exception):
    """What stops the command, said for the user; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class StatusOptions:
    kubeconfig: str | None = None
    """``--kubeconfig``; None: ``$KUBECONFIG``, ``~/.kube/config``, in-cluster."""
    context: str | None = None
    namespace: str | None = None
    """``-n``: only this namespace's pods are shown (all still count in VRAM reserved)."""
    node: str | None = None
    output: Output = "table"
    watch: bool = False
    color: bool | None = None
    """None: when stdout is a terminal and ``NO_COLOR`` is unset (no-color.org)."""
    pool_labels: tuple[str, ...] = POOL_LABELS


def resolve_kubeconfig(
    flag: str | None, env: Mapping[str, str], home: Path | None = None
) -> str | None:
    """The kubeconfig kubectl would read (:func:`gpusched.kube.client.resolve_kubeconfig`,
    every command's); None for in-cluster. Raises :class:`StatusError` (exit 2) when there is
    none and no in-cluster account."""
    try:
        return client_resolve_kubeconfig(flag, env, home)
    except KubeconfigError as exc:
        raise StatusError(str(exc), code=2) from None


async def _connect(options: StatusOptions, env: Mapping[str, str]) -> Kube:
    path = resolve_kubeconfig(options.kubeconfig, env)
    try:
        return await connect(options.kubeconfig, options.context, pool_size=4, env=env)
    except Exception as exc:  # kubernetes_asyncio raises ConfigException and plain errors
        where = f"kubeconfig {path}" if path else "the in-cluster configuration"
        context = f" (context {options.context})" if options.context else ""
        raise StatusError(f"cannot load {where}{context}: {exc}", code=2) from None


def _explain(exc: APIError, resource: str, scope: str, host: str) -> StatusError:
    """The message for a failed list of ``resource`` (``scope``: where it was listed)."""
    if exc.code == 0:
        return StatusError(
            f"cannot reach the API server at {host}: {exc.message}; is the cluster up, and is "
            "this the right kubeconfig and context?"
        )
    if exc.code == 401:
        return StatusError(
            f"the API server at {host} refused the credentials (401 Unauthorized): "
            f"{exc.message}; log in again or fix the kubeconfig's user"
        )
    if isinstance(exc, APIForbidden):
        return StatusError(
            f"forbidden: cannot list {resource} {scope} (403): {exc.message}\n  {NEEDED_ACCESS}"
        )
    if isinstance(exc, APINotFound) and resource == CRD_NAME:
        return StatusError(
            f"the cluster has no GPUNodeInventory CRD ({CRD_NAME}): install gpusched's CRDs "
            "with `kubectl apply -k deploy/crds` (and run the node agent, deploy/agent, so that "
            "nodes publish their GPUs)"
        )
    return StatusError(f"listing {resource} {scope}: the API server answered {exc}")


class Cluster:
    """The three kinds, listed once and optionally followed (module docstring)."""

    def __init__(self, kube: Kube, options: StatusOptions) -> None:
        self.kube = kube
        self.options = options
        self.changed = asyncio.Event()
        self.notes: list[str] = []
        self.memo = Memo()
        self.dra = False
        """Whether ResourceClaims and ResourceSlices were listed (served, and allowed)."""

        def handler(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            self.changed.set()

        self.nodes = Reflector(kube, resource_path("", "v1", "nodes"), handler=handler)
        self.inventories = Reflector(
            kube, resource_path(API_GROUP, VERSION, PLURAL), handler=handler
        )
        self.pods = Reflector(
            kube, resource_path("", "v1", "pods"), handler=handler, field_selector=UNFINISHED
        )
        # DRA (optional): GPUs ResourceClaims hold. A cluster without resource.k8s.io/v1, or a
        # reader without access to it, gets the status without them (and a note).
        self.claims = Reflector(
            kube, resource_path(DRA_GROUP, DRA_VERSION, "resourceclaims"), handler=handler
        )
        self.slices = Reflector(
            kube, resource_path(DRA_GROUP, DRA_VERSION, "resourceslices"), handler=handler
        )

    async def list(self) -> None:
        """One LIST per kind, at once; raises :class:`StatusError` on the first failure."""
        host = self.kube.host
        labelled = (
            (self.nodes, "nodes", "at cluster scope"),
            (self.inventories, CRD_NAME, "at cluster scope"),
            (self.pods, "pods", "in all namespaces"),
        )
        results = await asyncio.gather(*(r.list() for r, _, _ in labelled), return_exceptions=True)
        for (reflector, resource, scope), result in zip(labelled, results, strict=True):
            if (
                isinstance(result, APIForbidden)
                and reflector is self.pods
                and self.options.namespace
            ):
                # Namespace-scoped access: list that namespace's pods; the VRAM others hold on
                # the same GPUs is then unknown, and said so.
                ns = self.options.namespace
                self.pods.path = resource_path("", "v1", "pods", ns)
                try:
                    await self.pods.list()
                except APIError as exc:
                    raise _explain(exc, "pods", f"in namespace {ns}", host) from None
                self.notes.append(
                    f"pods listed in namespace {ns} only (forbidden in all namespaces): VRAM "
                    "reserved counts only its pods"
                )
                continue
            if isinstance(result, APIError):
                raise _explain(result, resource, scope, host) from None
            if isinstance(result, BaseException):
                raise result
        await self._list_dra()
        self.changed.clear()

    async def _list_dra(self) -> None:
        """ResourceClaims and ResourceSlices, where the cluster serves them and we may list
        them: the GPUs claims hold. Not served: nothing to say; forbidden: a note."""
        for reflector, resource in (
            (self.claims, "resourceclaims"),
            (self.slices, "resourceslices"),
        ):
            try:
                await reflector.list()
            except APINotFound:
                return
            except APIError as exc:
                self.notes.append(
                    f"{resource}.{DRA_GROUP} not listed ({exc.reason or exc.code}): GPUs held "
                    "by DRA ResourceClaims are shown free"
                    + ("; grant list on it to see them" if isinstance(exc, APIForbidden) else "")
                )
                return
        self.dra = True

    def status(self) -> ClusterStatus:
        status = build_status(
            self.nodes.items.values(),
            self.inventories.items.values(),
            self.pods.items.values(),
            claims=self.claims.items.values() if self.dra else (),
            slices=self.slices.items.values() if self.dra else (),
            namespace=self.options.namespace,
            node=self.options.node,
            pool_labels=self.options.pool_labels,
            memo=self.memo,
        )
        if self.notes:
            status = ClusterStatus(
                status.nodes,
                status.products,
                status.pools,
                status.pending,
                status.namespace,
                (*status.notes, *self.notes),
            )
        return status

    async def follow(self, reflector: Reflector) -> None:
        """Watch from the list's resourceVersion until cancelled; re-list on 410 Gone, back
        off (1 s doubling to 30 s) on other errors."""
        delay = 1.0
        while True:
            try:
                await reflector.watch_once()
                delay = 1.0
            except APIGone:
                with contextlib.suppress(APIError):
                    await reflector.list()
            except APIError as exc:
                log.warning("watching %s: %s; retrying in %.0fs", reflector.path, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)


async def collect(kube: Kube, options: StatusOptions) -> ClusterStatus:
    """List the cluster once and build its status (for callers and tests)."""
    cluster = Cluster(kube, options)
    await cluster.list()
    return cluster.status()


def use_color(options: StatusOptions, out: IO[str], env: Mapping[str, str]) -> bool:
    """``--color`` as given, else on a terminal unless ``NO_COLOR`` is set or ``TERM=dumb``."""
    if options.color is not None:
        return options.color
    return out.isatty() and not env.get("NO_COLOR") and env.get("TERM") != "dumb"


async def run(
    options: StatusOptions,
    *,
    out: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """The command: print the status once, or follow it until ``stop`` is set (``--watch``:
    SIGINT and SIGTERM set it, from the start, so Ctrl-C at any point exits 0).

    Raises :class:`StatusError` for what it cannot do (module docstring).
    """
    out = out or sys.stdout
    env = os.environ if env is None else env
    color = use_color(options, out, env)
    stop = stop or asyncio.Event()
    with _stop_on_signals(stop) if options.watch else contextlib.nullcontext():
        kube = await _connect(options, env)
        try:
            cluster = Cluster(kube, options)
            if not await _unless_stopped(cluster.list(), stop):
                return 0
            text = render(cluster.status(), options.output, color=color)
            out.write(text)
            out.flush()
            if options.watch:
                await _watch(cluster, options, out, text, color, stop)
            return 0
        finally:
            await kube.close()


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """While in the block, SIGINT and SIGTERM set ``stop`` (where the loop can take them)."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _unless_stopped(work: Awaitable[None], stop: asyncio.Event) -> bool:
    """Await ``work``; False, with ``work`` cancelled, when ``stop`` is set first."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()  # its exception, if it raised
    return True


async def _watch(
    cluster: Cluster,
    options: StatusOptions,
    out: IO[str],
    shown: str,
    color: bool,
    stop: asyncio.Event,
) -> None:
    terminal = out.isatty()
    reflectors = [cluster.nodes, cluster.inventories, cluster.pods]
    if cluster.dra:
        reflectors += [cluster.claims, cluster.slices]
    tasks = [asyncio.create_task(cluster.follow(r), name=f"status-{r.path}") for r in reflectors]
    stopped = asyncio.create_task(stop.wait(), name="status-stop")
    try:
        while not stop.is_set():
            changed = asyncio.create_task(cluster.changed.wait(), name="status-changed")
            await asyncio.wait({changed, stopped, *tasks}, return_when=asyncio.FIRST_COMPLETED)
            changed.cancel()
            for task in tasks:
                failure = task.exception() if task.done() and not task.cancelled() else None
                if failure is not None:
                    raise failure
            if stop.is_set():
                break
            cluster.changed.clear()
            await asyncio.sleep(0)  # let events that came in the same read land first
            text = render(cluster.status(), options.output, color=color)
            if text == shown:
                continue
            shown = text
            if terminal:
                out.write(_CLEAR)
            elif options.output == "yaml":
                out.write("---\n")
            elif options.output != "json":
                out.write("\n")
            out.write(text)
            out.flush()
    finally:
        stopped.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, stopped, return_exceptions=True)


def main(options: StatusOptions) -> int:
    """Run the command; messages to stderr, exit status as the module docstring says."""
    try:
        return asyncio.run(run(options))
    except StatusError as exc:
        print(f"gpusched status: {exc}", file=sys.stderr)
        return exc.code
