"""The ``gpusched`` command.

::

    gpusched scheduler   [--kubeconfig K] [--config FILE] [--leader-elect] [--metrics-port P]
    gpusched sim serve   --cluster NAME|FILE [--port P] [--kubeconfig OUT] [--faults SPEC]
                         [--no-webhook]
    gpusched sim run     [--cluster NAME|FILE] [--workload NAME|FILE] [--no-webhook]
                         [--output run.json] [--report report.html]
    gpusched sim report  RUN.json [-o report.html] [--png DIR]
    gpusched sim fleet   apply|delete --cluster NAME|FILE --kubeconfig K
    gpusched sim kubelet --kubeconfig K
    gpusched sim clusters
    gpusched webhook     [--tls self-signed|cert-manager|files] [--cert F --key F | --cert-dir D]
                         [--port 8443] [--failure-policy Ignore|Fail] [--kubeconfig K]
                         [--no-mig-fallback]
    gpusched webhook     --print-manifests [--output-dir DIR] [--failure-policy Ignore|Fail]
    gpusched agent       [--node-name N] [--kubeconfig K] [--interval S] [--allow-no-gpu]
                         [--fake-nvml CLUSTER:NODE | --nvml-tape FILE] [--metrics-port 10260]
                         [--no-device-plugin | --device-plugin-dir D --shared-replicas N]
    gpusched agent       --record-nvml FILE [--node-name N]
    gpusched status      [--kubeconfig K] [--context C] [-n NS] [--node N]
                         [-o table|wide|json|yaml] [--watch]
    gpusched explain     [NAMESPACE/]POD [-n NS] [--kubeconfig K] [--config F]
                         [-o table|wide|json|yaml]
    gpusched run         --name NAME [--gpus N] [--vram 16Gi] [--exclusive] [--gpu-ids 0,2]
                         [--prefer-node NODE] [--gang N] [--priority P] [--image IMAGE]
                         [--annotation K=V] [-n NS] [--timeout 30m] [--follow] -- CMD...
    gpusched cleanup     --name NAME | --all [-n NS | -A]
    gpusched controller  [--kubeconfig K] [-n NS] [--leader-elect] [--metrics-port 10261]
                         [--workers 5] [--profile STRATEGY=SCHEDULERNAME ...]

``gpusched run`` and ``cleanup``: :mod:`gpusched.runner`; ``gpusched controller`` (GPUWorkloads):
:mod:`gpusched.workloads`.

``gpusched scheduler`` serves ``/metrics``, ``/healthz`` (the process is alive) and ``/readyz``
on the metrics port. ``/readyz`` is 200 when the replica can do its part: without
``--leader-elect``, or while leading, once its informers have synced; while standing by, when
its last attempt read the leader Lease (it can take over). It exits 0 after SIGTERM or SIGINT
(the leader first stops scheduling, then releases the leader Lease so that a standby takes
over at once), and 1 when leadership is lost ("leaderelection lost", as kube-scheduler) or the
scheduler crashes (logged with its traceback), so that the kubelet restarts it. What the
cluster lacks for it (CRDs, the reservation namespace, RBAC) is logged with the command that
fixes it, and checked again until fixed, while it runs (:mod:`gpusched.preflight`).

``gpusched agent`` (the node agent, a DaemonSet; docs/agent.md) publishes its node's
GPUNodeInventory and GPU labels from NVML and serves ``/metrics``, ``/healthz`` and ``/readyz``
(the inventory is published and, unless ``--no-device-plugin``, the kubelet has registered
the device plugin) on its metrics port. On a node without GPUs or driver it exits 1
saying what is missing, unless ``--allow-no-gpu`` (then it publishes an empty inventory); it
exits 0 after SIGTERM or SIGINT.

Plugins: the in-tree ones and those installed packages declare under the ``gpusched.plugins``
entry-point group (docs/plugins.md). Errors in what the user gave (an unknown cluster name, a
broken YAML file, an unknown plugin, a plugin package that does not load, a bad fault spec)
end the command with a message saying what to fix (for a configuration, its file and line) and
exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpusched import __version__

if TYPE_CHECKING:
    from gpusched.framework import SchedulerConfiguration
    from gpusched.kube.client import Kube
    from gpusched.scheduler import Scheduler
    from gpusched.sim.fleet import ClusterSpec
    from gpusched.webhook.config import WebhookConfig

__all__ = ["main"]

log = logging.getLogger(__name__)


class UsageError(Exception):
    """Bad input from the user: printed as is, exit status 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpusched", description="A Kubernetes scheduler for GPU pods."
    )
    parser.add_argument("--version", action="version", version=f"gpusched {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", required=True)

    sched = sub.add_parser("scheduler", help="run the scheduler against a cluster")
    sched.add_argument("--kubeconfig", default=None, help="default: in-cluster configuration")
    sched.add_argument("--context", default=None)
    sched.add_argument("--config", default=None, help="a SchedulerConfiguration YAML file")
    sched.add_argument(
        "--scheduler-name", default=None, help="the schedulerName pods opt in with (gpusched)"
    )
    sched.add_argument("--leader-elect", action="store_true", help="active/passive replicas")
    sched.add_argument("--metrics-port", type=int, default=10259)
    sched.add_argument("--identity", default=None, help="this replica's name (default: random)")

    ctl = sub.add_parser(
        "controller",
        help="the GPUWorkload controller (gpu.warp.dev/v1alpha1): workloads into Jobs",
        description="docs/gpuworkload.md: the translation table, retries, status, metrics.",
    )
    ctl.add_argument("--kubeconfig", default=None, help="default: in-cluster configuration")
    ctl.add_argument("--context", default=None)
    ctl.add_argument("-n", "--namespace", default=None, help="only this namespace's workloads")
    ctl.add_argument("--leader-elect", action="store_true", help="active/passive replicas")
    ctl.add_argument("--leader-elect-namespace", default="gpusched-system")
    ctl.add_argument("--metrics-port", type=int, default=10261)
    ctl.add_argument(
        "--workers",
        type=int,
        default=5,
        metavar="N",
        help="workloads reconciled at once (default 5, as kube-controller-manager's "
        "--concurrent-job-syncs); one workload is never reconciled by two workers",
    )
    ctl.add_argument("--identity", default=None, help="this replica's name (default: random)")
    ctl.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="STRATEGY=SCHEDULERNAME",
        help="the schedulerName of a schedulingStrategy's pods (default leastLoaded="
        "gpusched-spread, costOptimized=gpusched-cheap, random=gpusched-random)",
    )
    ctl.add_argument(
        "--node-selector",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="the workloads' pods run only on nodes with this label (repeatable)",
    )
    ctl.add_argument(
        "--toleration",
        action="append",
        default=[],
        metavar="KEY[=VALUE][:EFFECT]",
        help="the workloads' pods tolerate this taint, e.g. a GPU pool's (repeatable)",
    )

    sim = sub.add_parser("sim", help="the simulated GPU cluster")
    simsub = sim.add_subparsers(dest="sim_command", required=True)

    run = simsub.add_parser(
        "run", help="simulated cluster + scheduler + a workload, with progress and a summary"
    )
    run.add_argument("--cluster", default="dgx-h100", help="shipped cluster name or YAML file")
    run.add_argument("--nodes", type=int, default=None, help="scale the fleet to N nodes")
    run.add_argument("--workload", default="dgx-mixed", help="shipped workload name or YAML file")
    run.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    run.add_argument(
        "--no-webhook",
        action="store_true",
        help="do not serve and register gpusched's admission webhook in the simulated cluster",
    )
    run.add_argument(
        "--output",
        metavar="RUN.json",
        default=None,
        help="write every pod's placement, times and pending reasons with the summary as JSON "
        "(kind gpusched.io/sim-run, version 1)",
    )
    run.add_argument(
        "--report",
        metavar="REPORT.html",
        default=None,
        help="write a self-contained HTML page with plots of the run (needs the 'report' "
        "extra: pip install 'gpusched[report]')",
    )

    report = simsub.add_parser(
        "report", help="the HTML report (and PNG figures) of a run.json from 'sim run --output'"
    )
    report.add_argument("run_file", metavar="RUN.json")
    report.add_argument("-o", "--output", metavar="REPORT.html", default=None)
    report.add_argument(
        "--png", metavar="DIR", default=None, help="write each figure and overview.png to DIR"
    )

    serve = simsub.add_parser(
        "serve", help="run a simulated API server, kubelets and a GPU fleet in the foreground"
    )
    serve.add_argument(
        "--cluster",
        default="dgx-h100",
        help="shipped cluster name or YAML file; 'none' serves an empty cluster",
    )
    serve.add_argument("--nodes", type=int, default=None, help="scale the fleet to N nodes")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    serve.add_argument(
        "--kubeconfig", default="gpusched-sim.kubeconfig", help="where to write the kubeconfig"
    )
    serve.add_argument("--faults", default="", help="fault spec, e.g. create=0.1:500,latency=5ms")
    serve.add_argument("--no-kubelets", action="store_true", help="do not run simulated kubelets")
    serve.add_argument(
        "--no-webhook",
        action="store_true",
        help="do not serve and register gpusched's admission webhook in the simulated cluster",
    )
    serve.add_argument(
        "--for",
        dest="duration",
        type=float,
        default=0.0,
        help="stop after this many seconds (default: run until interrupted)",
    )

    fleet = simsub.add_parser("fleet", help="create or delete a fleet's nodes on any API server")
    fleet.add_argument("action", choices=["apply", "delete"])
    fleet.add_argument("--cluster", required=True, help="shipped cluster name or YAML file")
    fleet.add_argument("--kubeconfig", required=True)
    fleet.add_argument("--context", default=None)

    kubelet = simsub.add_parser(
        "kubelet", help="play the kubelet for simulated nodes on any API server"
    )
    kubelet.add_argument("--kubeconfig", required=True)
    kubelet.add_argument("--context", default=None)
    kubelet.add_argument(
        "--heartbeat",
        type=float,
        default=10.0,
        help="seconds between node Lease renewals (0: none); keeps fake nodes Ready",
    )

    simsub.add_parser("clusters", help="list the shipped cluster specs")

    hook = sub.add_parser("webhook", help="the admission webhook (AdmissionReview v1, HTTPS)")
    hook.add_argument(
        "--tls",
        choices=["self-signed", "cert-manager", "files"],
        default=None,
        help="where the serving certificate comes from (docs/webhook.md): self-signed (default "
        "without --cert; keeps the Secret <service>-tls and patches caBundle), cert-manager "
        "(the mounted Secret; writes nothing), files (default with --cert/--key)",
    )
    hook.add_argument("--cert", default=None, help="serving certificate, PEM (--tls files)")
    hook.add_argument("--key", default=None, help="its private key, PEM (--tls files)")
    hook.add_argument(
        "--cert-dir",
        default="/etc/gpusched-webhook",
        help="where the mounted Secret's tls.crt and tls.key are, without --cert/--key "
        "(default /etc/gpusched-webhook)",
    )
    hook.add_argument(
        "--namespace",
        default=None,
        help="the webhook's namespace: its Secret's, and in its DNS names "
        "(default $POD_NAMESPACE, else gpusched-system)",
    )
    hook.add_argument(
        "--service-name",
        default="gpusched-webhook",
        help="its Service, webhook configurations and Secret <name>-tls (gpusched-webhook)",
    )
    hook.add_argument("--host", default="0.0.0.0")
    hook.add_argument("--port", type=int, default=8443)
    hook.add_argument(
        "--failure-policy",
        choices=["Ignore", "Fail"],
        default="Ignore",
        help="fail-open (Ignore, default) or fail-closed (Fail); see gpusched.webhook.config",
    )
    hook.add_argument(
        "--scheduler-name",
        action="append",
        default=None,
        help="pods with this schedulerName are checked and changed (repeatable; gpusched)",
    )
    hook.add_argument(
        "--visible-devices-for-device-plugin-pods",
        action="store_true",
        help="set NVIDIA_/CUDA_VISIBLE_DEVICES for nvidia.com/gpu and MIG pods too",
    )
    hook.add_argument(
        "--kubeconfig",
        default=None,
        help="for the MIG fallback's view of the cluster (default: in-cluster configuration)",
    )
    hook.add_argument("--context", default=None)
    hook.add_argument(
        "--no-mig-fallback",
        action="store_true",
        help="never rewrite a MIG request to a fallback profile (and watch nothing)",
    )
    hook.add_argument(
        "--print-manifests",
        action="store_true",
        help="print the RBAC, Service, Deployment and webhook configurations as YAML, and exit",
    )
    hook.add_argument(
        "--output-dir",
        default=None,
        help="with --print-manifests: write them as a kustomize folder (deploy/webhook/)",
    )

    explain = sub.add_parser(
        "explain",
        help="why a pod is pending, or where it went: the scheduler's own Filter and Score",
    )
    explain.add_argument("pod", metavar="[NAMESPACE/]POD")
    explain.add_argument("-n", "--namespace", default=None, help="default: the kubeconfig's")
    explain.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, ~/.kube/config")
    explain.add_argument("--context", default=None)
    explain.add_argument(
        "--config", default=None, help="the scheduler's configuration file (default: built in)"
    )
    explain.add_argument(
        "-o", "--output", choices=("table", "wide", "json", "yaml"), default="table"
    )
    explain.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the informers (60)"
    )
    runjob = sub.add_parser(
        "run",
        help="run a command on GPUs: create the pod (or gang) for gpusched and follow it",
        description="Create a pod (or a gang of N pods and their PodGroup) for gpusched, print "
        "its Events until it is bound (exit 0), or with --follow stream its log and exit with "
        "the container's exit code. Ctrl-C leaves it running.",
    )
    runjob.add_argument("--name", required=True, help="the run's name (its pod's, or gang's)")
    runjob.add_argument(
        "--gpus", type=int, default=None, metavar="N", help="GPUs per pod (default 1)"
    )
    runjob.add_argument(
        "--vram", default=None, help="VRAM per GPU, e.g. 16Gi: shared GPUs (default: whole GPUs)"
    )
    runjob.add_argument("--exclusive", action="store_true", help="GPUs nobody else joins")
    runjob.add_argument(
        "--gpu-ids", default=None, metavar="IDS", help="these device indices, e.g. 0,2"
    )
    runjob.add_argument("--prefer-node", default=None, metavar="NODE", help="a preferred node")
    runjob.add_argument("--gang", type=int, default=None, metavar="N", help="N pods, all or none")
    runjob.add_argument("--priority", default=None, metavar="P", help="0 (highest) to 4")
    runjob.add_argument("--image", default=None, help="container image (a CUDA base image)")
    runjob.add_argument(
        "--annotation",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another annotation on the pods (repeatable)",
    )
    runjob.add_argument(
        "--scheduler-name",
        default="gpusched",
        metavar="NAME",
        help="the gpusched profile (schedulerName), e.g. gpusched-spread (default gpusched)",
    )
    runjob.add_argument(
        "--node-selector",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only nodes with this label (repeatable)",
    )
    runjob.add_argument(
        "--toleration",
        action="append",
        default=[],
        metavar="KEY[=VALUE][:EFFECT]",
        help="tolerate this node taint, e.g. nvidia.com/gpu=present:NoSchedule (repeatable)",
    )
    runjob.add_argument(
        "-n", "--namespace", default=None, help="default: the kubeconfig context's, else default"
    )
    runjob.add_argument(
        "--timeout",
        default="30m",
        metavar="DURATION",
        help="give up waiting after this long (30m; 0: never)",
    )
    runjob.add_argument(
        "--follow", action="store_true", help="wait until running, stream the log, exit with it"
    )
    runjob.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, ~/.kube/config")
    runjob.add_argument("--context", default=None)
    runjob.add_argument("argv", nargs="*", metavar="-- CMD", help="the command to run")

    clean = sub.add_parser("cleanup", help="delete what `gpusched run` created")
    which = clean.add_mutually_exclusive_group(required=True)
    which.add_argument("--name", default=None, help="the run to delete")
    which.add_argument("--all", action="store_true", help="every run")
    where = clean.add_mutually_exclusive_group()
    where.add_argument(
        "-n", "--namespace", default=None, help="default: the kubeconfig context's, else default"
    )
    where.add_argument("-A", "--all-namespaces", action="store_true", help="in every namespace")
    clean.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, ~/.kube/config")
    clean.add_argument("--context", default=None)

    agent = sub.add_parser("agent", help="the node agent: publish this node's GPUs from NVML")
    agent.add_argument("--node-name", default=None, help="this node's name (default: $NODE_NAME)")
    agent.add_argument("--kubeconfig", default=None, help="default: in-cluster configuration")
    agent.add_argument("--context", default=None)
    agent.add_argument(
        "--interval", type=float, default=10.0, help="seconds between NVML readings (10)"
    )
    agent.add_argument(
        "--status-interval",
        type=float,
        default=60.0,
        help="seconds between telemetry writes at least (60); health changes go at once",
    )
    agent.add_argument(
        "--allow-no-gpu",
        action="store_true",
        help="without GPUs or driver, publish an empty inventory instead of exiting 1",
    )
    agent.add_argument(
        "--fake-nvml",
        default=None,
        metavar="CLUSTER:NODE",
        help="replay a simulated node's GPUs instead of NVML (demos and tests)",
    )
    agent.add_argument(
        "--nvml-tape",
        default=None,
        metavar="FILE",
        help="replay a recorded node's NVML (a tape from --record-nvml) instead of NVML",
    )
    agent.add_argument(
        "--record-nvml",
        default=None,
        metavar="FILE",
        help="read this node's GPUs once, save every NVML answer to FILE (for a bug report, "
        "or a test) and exit; connects to no cluster",
    )
    agent.add_argument("--metrics-port", type=int, default=10260)
    agent.add_argument(
        "--no-device-plugin",
        action="store_true",
        help="publish only; do not serve the kubelet device plugin (docs/device_plugin.md)",
    )
    agent.add_argument(
        "--device-plugin-dir",
        default="/var/lib/kubelet/device-plugins",
        help="the kubelet's device-plugin socket directory",
    )
    agent.add_argument(
        "--shared-replicas",
        type=int,
        default=10,
        help="pods that may share one GPU by VRAM, as the kubelet counts them (10)",
    )
    agent.add_argument(
        "--dev-root", default="/dev", help="where the host's /dev is mounted (device specs)"
    )
    status = sub.add_parser(
        "status",
        help="what is on the GPUs: per node and GPU, totals per product and pool, pending pods",
        description="Read-only (list, and watch with --watch, on nodes, pods and "
        "gpunodeinventories); docs/status.md explains the columns and the JSON schema.",
    )
    status.add_argument(
        "--kubeconfig", default=None, help="default: $KUBECONFIG, ~/.kube/config, in-cluster"
    )
    status.add_argument("--context", default=None)
    status.add_argument("-n", "--namespace", default=None, help="show only this namespace's pods")
    status.add_argument("--node", default=None, help="show only this node")
    status.add_argument(
        "-o", "--output", choices=["table", "wide", "json", "yaml"], default="table"
    )
    status.add_argument(
        "-w", "--watch", action="store_true", help="re-print on every change (Ctrl-C ends)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command == "sim":
            return _sim(args)
        if args.command == "scheduler":
            return asyncio.run(_scheduler(args))
        if args.command == "webhook":
            return _webhook(args)
        if args.command == "agent":
            return _agent(args)
        if args.command == "explain":
            return asyncio.run(_explain(args))
        if args.command == "controller":
            return asyncio.run(_controller(args))
        if args.command == "status":
            from gpusched.status.command import StatusOptions
            from gpusched.status.command import main as status_main

            return status_main(
                StatusOptions(
                    kubeconfig=args.kubeconfig,
                    context=args.context,
                    namespace=args.namespace,
                    node=args.node,
                    output=args.output,
                    watch=args.watch,
                )
            )
        if args.command == "run":
            return asyncio.run(_run_job(args))
        if args.command == "cleanup":
            return asyncio.run(_cleanup(args))
    except UsageError as exc:
        print(f"gpusched: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def _load_spec(name: str, nodes: int | None = None) -> ClusterSpec:
    from gpusched.sim.fleet import load_cluster_spec

    try:
        return load_cluster_spec(name, nodes=nodes)
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None


def _sim(args: argparse.Namespace) -> int:
    if args.sim_command == "clusters":
        from gpusched.sim.fleet import shipped_clusters

        for name in shipped_clusters():
            spec = _load_spec(name)
            print(f"{name:24} {spec.description}")
        return 0
    if args.sim_command == "serve":
        return asyncio.run(_serve(args))
    if args.sim_command == "report":
        return _sim_report(args)
    if args.sim_command == "run":
        _check_run_files(args)
        return asyncio.run(_run(args))
    if args.sim_command == "fleet":
        return asyncio.run(_fleet(args))
    if args.sim_command == "kubelet":
        return asyncio.run(_kubelet(args))
    raise UsageError(f"unknown command {args.sim_command}")


async def _gc_around_sync(scheduler: Scheduler) -> None:
    """The garbage collector around the informers' initial lists: off while they list, then
    ``gc.freeze()`` once they have synced (before the scheduler reports ready and schedules).

    Done by the commands only, never by library code: it affects the whole process (tests run
    many schedulers in one), and what is frozen stays out of every later collection.
    """
    # The initial list creates the long-lived objects (every Node, Pod and inventory the
    # informers hold, the cache's node infos: tens of container objects each), and each
    # automatic full collection while it runs walks all of those made so far: at 5,000 nodes
    # the collections during the list and a full one after it (as this did before) made
    # start-up cost 3.5-4.4 s of CPU instead of 1.9-2.6 s, with the same memory once synced.
    # Almost nothing the list makes is garbage in a reference cycle (orjson's dicts and
    # lists hold no cycles), so the collector is off until the sync ends. Then the survivors
    # are frozen, left out of later collections (in a 500-node end-to-end run of
    # benchmarks/scheduler_perf.py, nine full collections had taken 1.2 s, the longest
    # 222 ms: benchmarks/README.md). Frozen objects are still freed by reference counting
    # when the informers replace or drop them; only one that ends up in a garbage cycle is
    # never reclaimed.
    await scheduler.syncing.wait()
    gc.disable()
    try:
        await scheduler.synced.wait()
        gc.freeze()
    finally:
        gc.enable()


async def _wait_for_signal(duration: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if duration > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=duration)
    else:
        await stop.wait()


TELEMETRY_PERIOD = 10.0
"""Seconds between the simulated GPU telemetry readings of ``sim serve`` (a node agent's)."""


async def _serve(args: argparse.Namespace) -> int:
    from gpusched.sim import SimCluster, parse_faults

    spec = None if args.cluster == "none" else _load_spec(args.cluster, args.nodes)
    try:
        faults = parse_faults(args.faults)
    except ValueError as exc:
        raise UsageError(f"--faults: {exc}") from None
    async with SimCluster(
        spec,
        faults=faults,
        kubelets=not args.no_kubelets,
        host=args.host,
        port=args.port,
        kubeconfig_path=args.kubeconfig,
        webhook=not args.no_webhook,
        telemetry=None if args.no_kubelets else TELEMETRY_PERIOD,
    ) as sim:
        kubeconfig = sim.kubeconfig_path.resolve()
        fleet = "no nodes"
        if spec is not None:
            gpus = sum(p.count * p.gpu.count for p in spec.pools if p.gpu is not None)
            fleet = f"{spec.name}: {sum(p.count for p in spec.pools)} nodes, {gpus} GPUs"
        print(f"gpusched sim: API server at {sim.url} ({fleet})")
        print(f"  kubeconfig: {kubeconfig}")
        if sim.webhook is not None:
            print(
                f"  webhook:    gpusched's admission webhook at {sim.webhook.url}, registered "
                "as gpusched-system/gpusched-webhook (--no-webhook: off)"
            )
        print(f"  try:        kubectl --kubeconfig {kubeconfig} get nodes")
        print("  stop with Ctrl-C", flush=True)
        await _wait_for_signal(args.duration)
        print(f"gpusched sim: stopping after {sim.server.requests} API requests", flush=True)
    return 0


async def _fleet(args: argparse.Namespace) -> int:
    from gpusched.kube.errors import APIError
    from gpusched.sim.fleet import apply_fleet, delete_fleet

    spec = _load_spec(args.cluster)
    kube = await _connect(args)
    try:
        if args.action == "apply":
            await apply_fleet(kube.api_client, spec)
            print(f"fleet {spec.name}: {sum(p.count for p in spec.pools)} nodes applied")
        else:
            await delete_fleet(kube.api_client, spec)
            print(f"fleet {spec.name}: deleted")
    except APIError as exc:
        raise UsageError(f"the API server refused: {exc}") from None
    finally:
        await kube.close()
    return 0


async def _connect(args: argparse.Namespace) -> Kube:
    """The cluster as kubectl finds it (``--kubeconfig``, ``KUBECONFIG``, ``~/.kube/config``,
    in-cluster: :func:`gpusched.kube.client.resolve_kubeconfig`); a usage error saying what to
    give when there is none or it cannot be loaded."""
    from gpusched.kube.client import KubeconfigError, connect, resolve_kubeconfig

    try:
        return await connect(args.kubeconfig, args.context)
    except KubeconfigError as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # kubernetes_asyncio raises ConfigException and plain errors
        try:
            where = resolve_kubeconfig(args.kubeconfig) or "the in-cluster configuration"
        except KubeconfigError:
            where = args.kubeconfig
        context = f" (context {args.context})" if args.context else ""
        raise UsageError(f"cannot load kubeconfig {where}{context}: {exc}") from None


async def _kubelet(args: argparse.Namespace) -> int:
    from gpusched.sim.kubelet import SimKubelet

    kube = await _connect(args)
    task = asyncio.create_task(SimKubelet(kube, heartbeat=args.heartbeat).run())
    try:
        await _wait_for_signal(0)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await kube.close()
    return 0


async def _run(args: argparse.Namespace) -> int:
    from gpusched.framework import RegistryError
    from gpusched.sim.run import run_workload
    from gpusched.sim.workload import WorkloadError, load_workload

    spec = _load_spec(args.cluster, args.nodes)
    try:
        workload = load_workload(args.workload)
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None
    try:
        await run_workload(
            spec,
            workload,
            timeout=args.timeout,
            freeze_gc=True,
            webhook=not args.no_webhook,
            output=args.output,
            html=args.report,
        )
    except RegistryError as exc:  # an installed plugin package that does not load
        raise UsageError(str(exc)) from None
    return 0


def _check_run_files(args: argparse.Namespace) -> None:
    """Fail before a long run, not after it, on a file ``sim run`` could not write."""
    for flag, path in (("--output", args.output), ("--report", args.report)):
        if path is not None and not Path(path).resolve().parent.is_dir():
            raise UsageError(f"{flag} {path}: no such directory {Path(path).parent}")
    if args.report is not None:
        _require_plotting("--report")


def _require_plotting(flag: str) -> None:
    from gpusched.sim.report import PlottingUnavailable, require_plotting

    try:
        require_plotting()
    except PlottingUnavailable as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _sim_report(args: argparse.Namespace) -> int:
    from gpusched.sim.report import RunFileError, load_run, write_pngs, write_report

    if args.output is None and args.png is None:
        raise UsageError("sim report: nothing to write: give -o REPORT.html and/or --png DIR")
    _require_plotting("sim report")
    try:
        run = load_run(args.run_file)
    except RunFileError as exc:
        raise UsageError(str(exc)) from None
    if args.output is not None:
        write_report(run, args.output)
        print(f"wrote {args.output}")
    if args.png is not None:
        for path in write_pngs(run, args.png):
            print(f"wrote {path}")
    return 0


def _webhook(args: argparse.Namespace) -> int:
    import os

    from gpusched.webhook import WebhookConfig

    config = WebhookConfig(
        failure_policy=args.failure_policy,
        scheduler_names=tuple(args.scheduler_name or ("gpusched",)),
        visible_devices_for_device_plugin_pods=args.visible_devices_for_device_plugin_pods,
        namespace=args.namespace or os.environ.get("POD_NAMESPACE") or "gpusched-system",
        service_name=args.service_name,
    )
    if args.print_manifests:
        if not 0 < args.port < 65536:
            raise UsageError(f"webhook: --port {args.port}: the manifests need a port 1-65535")
        _print_webhook_manifests(config.model_copy(update={"port": args.port}), args.output_dir)
        return 0
    return asyncio.run(_serve_webhook(args, config))


_MANIFEST_HEADER = """\
# gpusched's admission webhook: {what}
# Generated by `gpusched webhook --print-manifests --output-dir deploy/webhook`
# (tests/test_webhook_config.py checks that these files match). docs/webhook.md explains TLS.
"""
_MANIFEST_WHAT = {
    "kustomization.yaml": "RBAC, Service, Deployment, webhook configurations.",
    "rbac.yaml": "ServiceAccount and least-privilege RBAC.",
    "service.yaml": "the Service the API server calls.",
    "deployment.yaml": "two replicas (TLS self-signed) and their PodDisruptionBudget.",
    "webhooks.yaml": (
        "Mutating/ValidatingWebhookConfiguration.\n"
        "# caBundle is patched in by the webhook (--tls self-signed) or by cert-manager's CA\n"
        "# injector (deploy/overlays/cert-manager). failurePolicy Ignore is fail-open, Fail is\n"
        "# fail-closed: gpusched/webhook/config.py says when to choose which."
    ),
}


def _print_webhook_manifests(config: WebhookConfig, output_dir: str | None) -> None:
    from pathlib import Path

    import yaml

    from gpusched.webhook.config import MANIFEST_FILES, webhook_manifest_files

    files = webhook_manifest_files(config)
    if output_dir is None:
        docs = [doc for name in MANIFEST_FILES for doc in files[name]]
        print(yaml.safe_dump_all(docs, sort_keys=False), end="")
        return
    out = Path(output_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": list(MANIFEST_FILES),
        }
        for name, body in (
            ("kustomization.yaml", yaml.safe_dump(kustomization, sort_keys=False)),
            *((n, yaml.safe_dump_all(files[n], sort_keys=False)) for n in MANIFEST_FILES),
        ):
            header = _MANIFEST_HEADER.format(what=_MANIFEST_WHAT[name])
            (out / name).write_text(header + body)
    except OSError as exc:
        raise UsageError(f"webhook: cannot write --output-dir {output_dir}: {exc}") from None


async def _webhook_kube(args: argparse.Namespace, needed_for: str | None) -> Kube | None:
    """The cluster of ``--kubeconfig`` or in-cluster. ``needed_for`` says what requires it
    (a failure is then an error); without it a failure is a warning and the MIG fallback off."""
    from gpusched.kube.client import connect

    try:
        return await connect(args.kubeconfig, args.context)
    except Exception as exc:  # kubernetes_asyncio raises ConfigException and plain errors
        if args.kubeconfig is not None:
            raise UsageError(f"webhook: cannot load kubeconfig {args.kubeconfig}: {exc}") from None
        if needed_for is not None:
            raise UsageError(
                f"webhook: {needed_for} needs the cluster (in-cluster, or --kubeconfig): {exc}; "
                "or serve a certificate you have with --cert F --key F"
            ) from None
        log.warning(
            "MIG fallback is off: no cluster to watch (%s); run in a cluster, give --kubeconfig, "
            "or pass --no-mig-fallback to silence this",
            exc,
        )
        return None


async def _serve_webhook(args: argparse.Namespace, config: WebhookConfig) -> int:
    from pathlib import Path

    from gpusched.kube.errors import APIError
    from gpusched.webhook import MigView, WebhookServer
    from gpusched.webhook.certs import CertError, TLSMode, WebhookCerts

    mode: TLSMode = args.tls or ("files" if args.cert or args.key else "self-signed")
    if mode != "self-signed" and bool(args.cert) != bool(args.key):
        raise UsageError("webhook: give both --cert and --key, or neither (--cert-dir)")
    cert_dir = Path(args.cert_dir)
    cert_file = Path(args.cert) if args.cert else cert_dir / "tls.crt"
    key_file = Path(args.key) if args.key else cert_dir / "tls.key"
    kube: Kube | None = None
    if mode == "self-signed" or not args.no_mig_fallback:
        kube = await _webhook_kube(args, "--tls self-signed" if mode == "self-signed" else None)
    view = MigView(kube) if kube is not None and not args.no_mig_fallback else None
    certs = WebhookCerts(
        config,
        mode=mode,
        kube=kube if mode == "self-signed" else None,
        cert_file=cert_file,
        key_file=key_file,
    )
    server = WebhookServer(config=config, mig_fallback=view)
    tasks: list[asyncio.Task[None]] = []
    try:
        try:
            ctx = await certs.start()
        except CertError as exc:
            raise UsageError(f"webhook: {exc}") from None
        except APIError as exc:
            raise UsageError(f"webhook: TLS {mode}: the API server answered {exc}") from None
        tasks.append(asyncio.create_task(certs.run(), name="webhook-certs"))
        if view is not None:
            tasks.append(asyncio.create_task(view.run(), name="mig-view"))
        try:
            await server.start(args.host, args.port, ssl_context=ctx)
        except OSError as exc:
            raise UsageError(f"webhook: cannot listen on {args.host}:{args.port}: {exc}") from None
        # Handlers first, then the line that says it is serving: a SIGTERM sent on seeing the
        # line is a graceful stop.
        stopped = asyncio.create_task(_wait_for_signal(0), name="wait-for-signal")
        await asyncio.sleep(0)
        print(
            f"gpusched webhook: serving /mutate and /validate on https://{args.host}:"
            f"{server.port} (failurePolicy {config.failure_policy}; TLS {mode}; MIG fallback "
            f"{'on' if view is not None else 'off'})",
            flush=True,
        )
        await stopped
    finally:
        await server.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        certs.close()
        if kube is not None:
            await kube.close()
    return 0


def _fake_nvml(value: str) -> tuple[object, str]:
    """``--fake-nvml CLUSTER:NODE``: a FakeNVML replaying that node, and the node's name."""
    from gpusched.agent.fake_nvml import FakeNVML
    from gpusched.sim.fleet import build_fleet

    cluster, _, node = value.rpartition(":")
    if not cluster or not node:
        raise UsageError(f"--fake-nvml {value!r}: give CLUSTER:NODE, e.g. dgx-h100:dgx-h100-0")
    spec = _load_spec(cluster)
    sim = next((n for n in build_fleet(spec) if n.name == node), None)
    if sim is None:
        raise UsageError(f"--fake-nvml: cluster {spec.name!r} has no node {node!r}")
    try:
        return FakeNVML.of_sim_node(sim, spec), node
    except ValueError as exc:
        raise UsageError(f"--fake-nvml: {exc}") from None


def _agent(args: argparse.Namespace) -> int:
    import os

    nvml: object
    fake_node = None
    if args.fake_nvml and args.nvml_tape:
        raise UsageError("agent: give --fake-nvml or --nvml-tape, not both")
    if args.record_nvml:
        return _record_nvml(args)
    if args.fake_nvml:
        nvml, fake_node = _fake_nvml(args.fake_nvml)
    elif args.nvml_tape:
        from gpusched.agent.nvml_tape import ReplayNVML

        try:
            tape = ReplayNVML.load(Path(args.nvml_tape))
        except ValueError as exc:
            raise UsageError(f"--nvml-tape: {exc}") from None
        nvml, fake_node = tape, tape.node_name or None
    else:
        import pynvml

        nvml = pynvml
    node = args.node_name or os.environ.get("NODE_NAME") or fake_node
    if not node:
        raise UsageError(
            "agent: --node-name is required (or NODE_NAME; in a DaemonSet, from the downward "
            "API's spec.nodeName)"
        )
    if args.interval <= 0 or args.status_interval <= 0:
        raise UsageError("agent: --interval and --status-interval must be > 0 seconds")
    if args.shared_replicas < 0:
        raise UsageError("agent: --shared-replicas must be 0 (no sharing) or more")
    return asyncio.run(_run_agent(args, nvml, node))


async def _explain(args: argparse.Namespace) -> int:
    from gpusched.framework import ConfigError, default_config, load_config

    try:
        config = load_config(args.config) if args.config else default_config()
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.verbose:
        return await _explain_pod(args, config)
    # A kind the cluster does not serve is no news to this reader (the level is put back:
    # main() may run in a process that goes on, as the tests' does).
    with _logger_level("gpusched.kube.reflector", logging.ERROR):
        return await _explain_pod(args, config)


@contextlib.contextmanager
def _logger_level(name: str, level: int) -> Iterator[None]:
    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)


async def _explain_pod(args: argparse.Namespace, config: SchedulerConfiguration) -> int:
    import json

    import yaml

    from gpusched.explain import as_dict, explain, render
    from gpusched.framework import ConfigError, RegistryError
    from gpusched.kube.client import resource_path
    from gpusched.kube.errors import APIError, APINotFound
    from gpusched.kube.reflector import object_key
    from gpusched.scheduler import Scheduler

    namespace, _, name = args.pod.rpartition("/")
    kube = await _connect(args)
    try:
        namespace = namespace or args.namespace or "default"
        try:
            pod = await kube.get(resource_path("", "v1", "pods", namespace, name=name))
        except APINotFound:
            print(f"gpusched explain: pod {namespace}/{name} not found", file=sys.stderr)
            return 1
        except APIError as exc:
            print(f"gpusched explain: reading pod {namespace}/{name}: {exc}", file=sys.stderr)
            return 1
        try:
            scheduler = Scheduler(kube, config, identity="gpusched-explain")
        except (ConfigError, RegistryError) as exc:
            raise UsageError(str(exc)) from None
        try:
            async with asyncio.timeout(args.timeout), scheduler.informed():
                pod = scheduler.pods.items.get(object_key(pod), pod)  # the informer's copy
                explanation = explain(scheduler, pod)
        except TimeoutError:
            print(
                f"gpusched explain: the cluster did not list {', '.join(scheduler.unsynced())} "
                f"within {args.timeout:g} s; check that this kubeconfig may list them "
                "(deploy/scheduler's ClusterRole) and that their CRDs are installed",
                file=sys.stderr,
            )
            return 1
    finally:
        await kube.close()
    if args.output == "json":
        print(json.dumps(as_dict(explanation), indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(as_dict(explanation), sort_keys=False), end="")
    else:
        print(render(explanation, wide=args.output == "wide"), end="")
    return 0


async def _run_job(args: argparse.Namespace) -> int:
    from gpusched.runner import (
        DEFAULT_IMAGE,
        RunError,
        RunOptions,
        build_plan,
        kubeconfig_namespace,
        parse_annotation,
        parse_duration,
        parse_node_selector,
        parse_toleration,
        run,
    )

    try:
        plan = build_plan(
            RunOptions(
                name=args.name,
                command=tuple(args.argv[1:] if args.argv[:1] == ["--"] else args.argv),
                gpus=args.gpus,
                vram=args.vram,
                exclusive=args.exclusive,
                gpu_ids=args.gpu_ids,
                prefer_node=args.prefer_node,
                gang=args.gang,
                priority=args.priority,
                image=args.image or DEFAULT_IMAGE,
                namespace=args.namespace or kubeconfig_namespace(args.kubeconfig, args.context),
                timeout=parse_duration(args.timeout),
                follow=args.follow,
                annotations=tuple(parse_annotation(a) for a in args.annotation),
                scheduler_name=args.scheduler_name,
                node_selector=tuple(parse_node_selector(a) for a in args.node_selector),
                tolerations=tuple(parse_toleration(a) for a in args.toleration),
            )
        )
    except RunError as exc:
        raise UsageError(f"run: {exc}") from None
    interrupted = asyncio.Event()  # Ctrl-C: stop watching, leave the run going
    with _signals_set(interrupted):
        kube = await _connect(args)
        try:
            return await run(kube, plan, interrupted=interrupted)
        finally:
            await kube.close()


async def _cleanup(args: argparse.Namespace) -> int:
    from gpusched.runner import cleanup, kubeconfig_namespace

    namespace = None
    if not args.all_namespaces:
        namespace = args.namespace or kubeconfig_namespace(args.kubeconfig, args.context)
    kube = await _connect(args)
    try:
        return await cleanup(kube, None if args.all else args.name, namespace)
    finally:
        await kube.close()


def _record_nvml(args: argparse.Namespace) -> int:
    """``--record-nvml FILE``: discovery and one reading through a recording NVML, saved."""
    import os
    import socket

    import pynvml

    from gpusched.agent.discovery import AgentError, discover
    from gpusched.agent.health import XIDPolicy
    from gpusched.agent.nvml_tape import RecordingNVML
    from gpusched.agent.telemetry import NVMLMonitor

    node = args.node_name or os.environ.get("NODE_NAME") or socket.gethostname()
    out = Path(args.record_nvml)
    recording = RecordingNVML(pynvml)
    try:
        try:
            inventory = discover(recording, node)
        except AgentError as exc:
            print(f"gpusched agent: {exc}", file=sys.stderr)
            return 1
        monitor = NVMLMonitor(recording, inventory, XIDPolicy.from_env(os.environ))
        monitor.open()
        try:
            readings = monitor.read()
        finally:
            monitor.close()
    finally:
        try:
            recording.save(out, node)
        except OSError as exc:
            raise UsageError(f"--record-nvml: cannot write {out}: {exc}") from None
    print(f"recorded {len(recording.calls)} NVML calls on node {node} to {out}")
    for gpu, reading in zip(inventory.gpus, readings, strict=True):
        print(
            f"  GPU {gpu.index} {gpu.product} {gpu.memory_mib} MiB {gpu.uuid} "
            f"{gpu.pci_bus_id} minor {gpu.minor_number} MIG {'on' if gpu.mig_enabled else 'off'}"
            f" {reading.health}"
        )
    for link in inventory.links:
        print(f"  link {link.a}-{link.b} {link.type} nvlinks {link.nvlinks} pcie {link.pcie}")
    return 0


def _no_gpu(exc: Exception, node: str) -> int:
    print(
        f"gpusched agent: {exc}\n  no GPU to publish on node {node}; run with --allow-no-gpu "
        "to publish an empty inventory instead",
        file=sys.stderr,
    )
    return 1


async def _run_agent(args: argparse.Namespace, nvml: object, node: str) -> int:
    from gpusched.agent.discovery import AgentError, discover
    from gpusched.agent.main import Agent, AgentSettings
    from gpusched.metrics import OperationsServer

    stop = asyncio.Event()
    with _signals_set(stop):
        if not args.allow_no_gpu:
            # Before connecting: a node without GPUs says so even where no cluster is reachable.
            try:
                await asyncio.to_thread(discover, nvml, node)
            except AgentError as exc:
                return _no_gpu(exc, node)
        kube = await _connect(args)
        settings = AgentSettings(
            interval=args.interval,
            status_interval=args.status_interval,
            allow_no_gpu=args.allow_no_gpu,
        )
        plugins = None
        if not args.no_device_plugin:
            from gpusched.agent.deviceplugin import DevicePluginListener

            plugins = DevicePluginListener(
                kube,
                node,
                socket_dir=args.device_plugin_dir,
                shared_replicas=args.shared_replicas,
                dev_root=args.dev_root,
            )
        agent = Agent(kube, nvml, node, settings, listeners=[plugins] if plugins else [])

        def ready() -> bool:  # published, and the kubelet has the device plugin
            return agent.ready.is_set() and (plugins is None or plugins.ready())

        ops = OperationsServer(agent.metrics, ready)
        try:
            try:
                await ops.start(port=args.metrics_port)
            except OSError as exc:
                raise UsageError(f"agent: cannot listen on :{args.metrics_port}: {exc}") from None
            work = asyncio.create_task(agent.run(), name="agent")
            stopping = asyncio.create_task(stop.wait(), name="wait-for-signal")
            print(
                f"gpusched agent: publishing node {node}'s GPUs; metrics on :{ops.port}",
                flush=True,
            )
            await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
            agent.stop()
            stopping.cancel()
            outcome, _ = await asyncio.gather(work, stopping, return_exceptions=True)
        finally:
            if plugins is not None:
                await plugins.stop()
            await ops.stop()
            await kube.close()
    if isinstance(outcome, AgentError):
        return _no_gpu(outcome, node)
    if isinstance(outcome, BaseException):
        log.critical("the agent crashed", exc_info=outcome)
        return 1
    return 0


@contextlib.contextmanager
def _signals_set(stop: asyncio.Event) -> Iterator[None]:
    """While in the block, SIGINT and SIGTERM set ``stop`` instead of killing the process."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _scheduler(args: argparse.Namespace) -> int:
    # Signal handlers first: a SIGTERM that comes while connecting or starting (a rolling
    # update can stop a pod at any time) is a graceful stop too, not a kill.
    stop = asyncio.Event()
    with _signals_set(stop):
        return await _run_scheduler(args, stop)


async def _run_scheduler(args: argparse.Namespace, stop: asyncio.Event) -> int:
    from gpusched.framework import ConfigError, RegistryError, default_config, load_config
    from gpusched.leader import LeaderElectionConfig, LeaderElector
    from gpusched.metrics import Metrics, OperationsServer
    from gpusched.preflight import Preflight
    from gpusched.scheduler import Scheduler

    try:
        config = load_config(args.config) if args.config else default_config()
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.scheduler_name:
        if len(config.profiles) != 1:
            raise UsageError("--scheduler-name needs a configuration with exactly one profile")
        profile = config.profiles[0].model_copy(update={"scheduler_name": args.scheduler_name})
        config = config.model_copy(update={"profiles": [profile]})
    kube = await _connect(args)
    metrics = Metrics()
    try:
        # The in-tree plugins and the installed entry points (gpusched.plugins), loaded once;
        # configuration errors name the file and line (the configuration keeps its origin).
        scheduler = Scheduler(kube, config, identity=args.identity, metrics=metrics)
    except (ConfigError, RegistryError) as exc:
        await kube.close()
        raise UsageError(str(exc)) from None
    elector: LeaderElector | None = None
    if args.leader_elect:
        le = config.leader_election
        elector = LeaderElector(
            kube,
            scheduler.identity,
            LeaderElectionConfig(
                namespace=le.resource_namespace,
                name=le.resource_name,
                lease_duration=le.lease_duration,
                renew_deadline=le.renew_deadline,
                retry_period=le.retry_period,
            ),
        )

    def ready() -> bool:
        # /readyz. Leading, or without leader election: the informers have synced. Standing
        # by: the last attempt read the leader Lease, so this replica can take over. A standby
        # is Ready, as kube-scheduler's is, or a rolling update of the Deployment would wait
        # forever for a new replica that cannot lead while the old leader runs.
        if elector is None or elector.is_leader:
            return scheduler.ready.is_set()
        return elector.lease_readable

    metrics.leader.labels(config.leader_election.resource_name).set_function(
        lambda: float(elector is None or elector.is_leader)
    )
    ops = OperationsServer(metrics, ready)
    await ops.start(port=args.metrics_port)
    print(
        f"gpusched {scheduler.identity}: scheduling pods with schedulerName "
        f"{', '.join(scheduler.frameworks)}; metrics on :{ops.port}",
        flush=True,
    )
    if elector is not None:
        work = asyncio.create_task(elector.run(scheduler.run), name="leader-election")
    else:
        work = asyncio.create_task(scheduler.run(), name="scheduler")
    freeze = asyncio.create_task(_gc_around_sync(scheduler), name="gc-freeze")
    # What the cluster lacks (CRDs, namespace, permissions), logged with the fix and checked
    # again every 30 s until none remains; the scheduler runs meanwhile (gpusched.preflight).
    checks = Preflight(kube, config, scheduler.clock, registry=metrics.registry)
    check = asyncio.create_task(checks.run(), name="preflight")
    stopping = asyncio.create_task(stop.wait(), name="wait-for-signal")
    try:
        await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (work, stopping, freeze, check):
            task.cancel()
        outcome, *_ = await asyncio.gather(work, stopping, freeze, check, return_exceptions=True)
        await ops.stop()
        await kube.close()
    return _exit_status(outcome, stop.is_set())


async def _controller(args: argparse.Namespace) -> int:
    """``gpusched controller``: signals as ``gpusched scheduler`` (0 after SIGTERM, 1 when
    leadership is lost or the controller crashes)."""
    import secrets

    from gpusched.leader import LeaderElectionConfig, LeaderElector
    from gpusched.metrics import OperationsServer
    from gpusched.runner import RunError, parse_node_selector, parse_toleration
    from gpusched.workloads.controller import WorkloadController
    from gpusched.workloads.manager import DEFAULT_PROFILES, STRATEGIES, Settings

    profiles = dict(DEFAULT_PROFILES)
    for item in args.profile:
        strategy, sep, name = item.partition("=")
        if not sep or strategy not in STRATEGIES or not name:
            raise UsageError(
                f"--profile {item!r}: write STRATEGY=SCHEDULERNAME, STRATEGY one of "
                + ", ".join(STRATEGIES)
            )
        profiles[strategy] = name
    try:
        settings = Settings(
            profiles=profiles,
            node_selector=dict(parse_node_selector(a) for a in args.node_selector),
            tolerations=tuple(parse_toleration(a) for a in args.toleration),
        )
    except RunError as exc:
        raise UsageError(f"controller: {exc}") from None
    if args.workers < 1:
        raise UsageError(f"--workers {args.workers}: write a whole number of at least 1")
    stop = asyncio.Event()
    with _signals_set(stop):
        kube = await _connect(args)
        controller = WorkloadController(
            kube, settings=settings, namespace=args.namespace, workers=args.workers
        )
        identity = args.identity or f"gpusched-controller-{secrets.token_hex(4)}"
        elector: LeaderElector | None = None
        if args.leader_elect:
            elector = LeaderElector(
                kube,
                identity,
                LeaderElectionConfig(
                    namespace=args.leader_elect_namespace, name="gpusched-controller"
                ),
            )

        def ready() -> bool:
            if elector is None or elector.is_leader:
                return controller.synced.is_set()
            return elector.lease_readable

        ops = OperationsServer(controller.metrics, ready)
        await ops.start(port=args.metrics_port)
        print(
            f"gpusched controller {identity}: reconciling GPUWorkloads; metrics on :{ops.port}",
            flush=True,
        )
        if elector is not None:
            work = asyncio.create_task(elector.run(controller.run), name="leader-election")
        else:
            work = asyncio.create_task(controller.run(), name="controller")
        stopping = asyncio.create_task(stop.wait(), name="wait-for-signal")
        try:
            await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (work, stopping):
                task.cancel()
            outcome, _ = await asyncio.gather(work, stopping, return_exceptions=True)
            await ops.stop()
            await kube.close()
    return _exit_status(outcome, stop.is_set())


def _exit_status(outcome: object, stop_requested: bool) -> int:
    """The exit status of ``gpusched scheduler`` from how its work ended.

    0 after a graceful stop (SIGTERM, SIGINT). 1 when the work ended by itself: leadership
    lost (as kube-scheduler, "leaderelection lost"), a crash (logged with its traceback) or,
    unexpectedly, a return; the kubelet then restarts the container as a fresh candidate.
    """
    from gpusched.leader import LeadershipLost

    if isinstance(outcome, asyncio.CancelledError):
        return 0
    if isinstance(outcome, LeadershipLost):
        log.error("leaderelection lost: %s", outcome)
        return 1
    if isinstance(outcome, BaseException):
        log.critical("the scheduler crashed", exc_info=outcome)
        return 1
    if stop_requested:
        return 0
    log.error("the scheduler stopped by itself")
    return 1
