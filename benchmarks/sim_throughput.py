"""Throughput of the simulated API server, so later figures can be read against it.

Runs ``gpusched sim serve`` in its own process (so the load generator does not steal its CPU)
and drives it with C concurrent clients (1, 10, 100), each a kubernetes-asyncio ApiClient
through gpusched's ``Kube`` JSON client:

- ``create``   POST pods/s
- ``bind``     POST pods/{name}/binding per second
- ``get``      GET pod per second
- ``watch``    watch events delivered per second, summed over C watchers that each resume
               from a resourceVersion and receive the same ``--ops`` pod updates

Baseline, measured side by side in the same run: a bare aiohttp server (HTTPS, like the
simulation) in its own process that answers every request with a fixed JSON pod (no storage,
no semantics), driven by the same client. The gap between the two is what the API semantics
cost; the baseline is the ceiling the client, TLS and loopback HTTP allow on this machine.

    python benchmarks/sim_throughput.py [--ops 2000] [--clients 1,10,100] [--json out.json]

Prints a table and the same figures as JSON. Medians of ``--repeats`` runs after a warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from gpusched.kube.client import Kube, connect
from gpusched.sim.tls import make_serving_certs

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "x", "labels": {"app": "bench"}},
    "spec": {
        "schedulerName": "gpusched",
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        ],
    },
}

BASELINE_SERVER = r"""
import json, ssl, sys
from aiohttp import web
BODY = json.dumps(json.loads(sys.argv[2])).encode()
ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain(sys.argv[3], sys.argv[4])
async def handle(request):
    if request.query.get("watch") == "true":
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        line = b'{"type":"MODIFIED","object":' + BODY + b'}\n'
        n = int(request.query.get("limit", "1000"))
        for i in range(0, n, 100):
            await resp.write(line * min(100, n - i))
        await resp.write_eof()
        return resp
    await request.read()
    return web.Response(body=BODY, status=201 if request.method == "POST" else 200,
                        content_type="application/json")
app = web.Application()
app.router.add_route("*", "/{tail:.*}", handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None,
            ssl_context=ctx)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """A server process and a kubeconfig for it."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.port = _free_port()
        self.kubeconfig = tmp / f"{kind}.kubeconfig"
        if kind == "sim":
            cmd = [
                sys.executable,
                "-m",
                "gpusched",
                "sim",
                "serve",
                "--cluster",
                "none",
                "--no-kubelets",
                "--port",
                str(self.port),
                "--kubeconfig",
                str(self.kubeconfig),
            ]
        else:
            pod = dict(POD, metadata={**POD["metadata"], "resourceVersion": "1", "uid": "u"})
            certs = make_serving_certs(directory=tmp / "baseline-tls")
            cmd = [
                sys.executable,
                "-c",
                BASELINE_SERVER,
                str(self.port),
                json.dumps(pod),
                str(certs.directory / "tls.crt"),
                str(certs.directory / "tls.key"),
            ]
            cluster = {
                "server": f"https://127.0.0.1:{self.port}",
                "certificate-authority-data": certs.ca_data,
            }
            self.kubeconfig.write_text(
                yaml.safe_dump(
                    {
                        "apiVersion": "v1",
                        "kind": "Config",
                        "clusters": [{"name": "b", "cluster": cluster}],
                        "users": [{"name": "b", "user": {"token": "t"}}],
                        "contexts": [{"name": "b", "context": {"cluster": "b", "user": "b"}}],
                        "current-context": "b",
                    }
                )
            )
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=os.environ | {"PYTHONUNBUFFERED": "1"},
        )

    async def ready(self) -> None:
        import aiohttp

        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    out = self.proc.stdout.read().decode() if self.proc.stdout else ""
                    raise RuntimeError(f"{self.kind} server exited: {out}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    url = f"https://127.0.0.1:{self.port}/healthz"
                    async with session.get(url, ssl=False) as r:
                        if r.status == 200 and self.kubeconfig.exists():
                            return
                await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.kind} server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        if self.proc.poll() is None:
            self.proc.kill()


async def _run_concurrent(
    clients: int, ops: int, op: Callable[[int, int], Awaitable[None]]
) -> float:
    """Run ``ops`` operations split over ``clients`` workers; returns ops/s."""
    per = max(ops // clients, 1)

    async def worker(w: int) -> None:
        for i in range(per):
            await op(w, i)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(clients)))
    return per * clients / (time.perf_counter() - t0)


async def bench_server(server: Server, clients: int, ops: int, run_id: str) -> dict[str, float]:
    kubes = [await connect(server.kubeconfig) for _ in range(min(clients, 10))]
    ns = "default"
    results: dict[str, float] = {}

    def kube(w: int) -> Kube:
        return kubes[w % len(kubes)]

    def pod(name: str) -> dict[str, Any]:
        return dict(POD, metadata={**POD["metadata"], "name": name})

    base = f"/api/v1/namespaces/{ns}/pods"
    results["create"] = await _run_concurrent(
        clients, ops, lambda w, i: kube(w).create(base, pod(f"{run_id}-c{clients}-{w}-{i}"))
    )
    results["get"] = await _run_concurrent(
        clients, ops, lambda w, i: kube(w).get(f"{base}/{run_id}-c{clients}-{w}-{i}")
    )

    async def bind(w: int, i: int) -> None:
        name = f"{run_id}-c{clients}-{w}-{i}"
        await kube(w).create(
            f"{base}/{name}/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "node-0"},
            },
        )

    results["bind"] = await _run_concurrent(clients, ops, bind)

    # Watch: the writes happen first; then C watchers each replay them from the watch window
    # (a watch resuming from a resourceVersion), so this is the delivery rate, not the write rate.
    events = ops
    received = [0] * clients
    rv = (await kubes[0].get(base, {"limit": "1"}))["metadata"]["resourceVersion"]
    if server.kind == "sim":
        names = [f"{run_id}-c{clients}-0-{i % max(ops // clients, 1)}" for i in range(events)]
        await _run_concurrent(
            10,
            events,
            lambda w, i: kube(w).patch(
                f"{base}/{names[w * (events // 10) + i]}",
                {"metadata": {"labels": {"n": str(w * (events // 10) + i)}}},
            ),
        )

    async def watcher(w: int) -> None:
        query = {"resourceVersion": rv, "limit": str(events), "timeoutSeconds": "60"}
        async for _ in kube(w).watch(base, query):
            received[w] += 1
            if received[w] >= events:
                return

    t0 = time.perf_counter()
    await asyncio.gather(*(watcher(w) for w in range(clients)))
    results["watch_events"] = sum(received) / (time.perf_counter() - t0)
    for k in kubes:
        await k.close()
    return results


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    client_counts = [int(c) for c in args.clients.split(",")]
    figures: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("sim", "baseline"):
            server = Server(kind, Path(tmp))
            try:
                await server.ready()
                await bench_server(server, 10, 200, "warm")
                for clients in client_counts:
                    samples: dict[str, list[float]] = {}
                    for r in range(args.repeats):
                        res = await bench_server(server, clients, args.ops, f"r{r}")
                        for k, v in res.items():
                            samples.setdefault(k, []).append(v)
                    row = {k: statistics.median(v) for k, v in samples.items()}
                    figures["runs"].append({"server": kind, "clients": clients, **row})
            finally:
                server.stop()
    return figures


def print_table(figures: dict[str, Any]) -> None:
    cols = ["create", "get", "bind", "watch_events"]
    print(f"{'server':10} {'clients':>7} " + " ".join(f"{c + '/s':>15}" for c in cols))
    for row in figures["runs"]:
        print(
            f"{row['server']:10} {row['clients']:>7} " + " ".join(f"{row[c]:>15,.0f}" for c in cols)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=2000, help="operations per measurement")
    parser.add_argument("--clients", default="1,10,100")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default="", help="also write the figures to this file")
    args = parser.parse_args()
    figures = asyncio.run(main_async(args))
    print_table(figures)
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
