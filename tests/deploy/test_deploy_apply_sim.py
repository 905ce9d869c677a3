"""`kubectl apply -k` of deploy/ and of its overlays on an empty simulated cluster: every object is
created, reads back as built, and a second apply changes nothing (SimCluster() starts with the
policy and gang CRDs installed, so those are "configured" by the first apply)."""

from __future__ import annotations

import asyncio
import json

import pytest
from deploy_helpers import DEPLOY, KUBECTL, OVERLAYS, key, kustomize

from gpusched.sim import SimCluster

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.simonly,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) is not installed"),
]

NEEDS_OTHER_CRDS = {"cert-manager": "its Issuer and Certificate need cert-manager's CRDs"}


async def kubectl(sim: SimCluster, *args: str) -> str:
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        *(KUBECTL, "--kubeconfig", str(sim.kubeconfig_path), *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"HOME": str(sim.kubeconfig_path.parent), "PATH": "/usr/bin:/bin"},
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, f"kubectl {' '.join(args)} failed: {err.decode()}"
    return out.decode()


FOLDERS = [
    "",
    *(
        pytest.param(f"overlays/{o}", marks=pytest.mark.skip(reason=NEEDS_OTHER_CRDS[o]))
        if o in NEEDS_OTHER_CRDS
        else f"overlays/{o}"
        for o in OVERLAYS
    ),
]


@pytest.mark.parametrize("folder", FOLDERS)
async def test_apply_k_creates_every_object(folder: str) -> None:
    built = {key(o): o for o in kustomize(DEPLOY / folder)}
    path = str(DEPLOY / folder)
    async with SimCluster(kubelets=False) as sim:
        out = await kubectl(sim, "apply", "-k", path)
        lines = out.splitlines()
        assert len(lines) == len(built), out
        assert all(line.endswith((" created", " configured", " unchanged")) for line in lines)

        listing = json.loads(await kubectl(sim, "get", "-k", path, "-o", "json"))
        read = {key(o): o for o in listing["items"]}
        assert sorted(read) == sorted(built)
        for k, obj in built.items():
            got = read[k]
            for field in ("spec", "data", "rules", "roleRef", "subjects", "webhooks"):
                if field in obj and k[0] != "CustomResourceDefinition":
                    assert _contains(got[field], obj[field]), (k, field)
            for label, value in (obj["metadata"].get("labels") or {}).items():
                assert got["metadata"]["labels"][label] == value, k

        # A second apply changes nothing. kubectl says "configured" for a PodDisruptionBudget
        # whatever the cluster (its selector's patch strategy is replace, so the patch is never
        # empty): there the object's resourceVersion says that nothing changed.
        again = await kubectl(sim, "apply", "-k", path)
        for line in again.splitlines():
            assert line.endswith(" unchanged") or line.startswith("poddisruptionbudget"), line
        after = json.loads(await kubectl(sim, "get", "-k", path, "-o", "json"))["items"]
        versions = {key(o): o["metadata"]["resourceVersion"] for o in listing["items"]}
        assert {key(o): o["metadata"]["resourceVersion"] for o in after} == versions


def _contains(got: object, want: object) -> bool:
    """``want`` is in ``got``, which may carry fields the API server defaulted."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(
            k in got and _contains(got[k], v) for k, v in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(_contains(g, w) for g, w in zip(got, want, strict=True))
        )
    return got == want


async def test_apply_f_crds_takes_only_the_crds() -> None:
    """crds/Kustomization has no YAML extension, so `kubectl apply -f deploy/crds/` (the command
    docs/install.md gives after a Helm upgrade) skips it."""
    crds = sorted((DEPLOY / "crds").glob("*.yaml"))
    async with SimCluster(kubelets=False) as sim:
        out = await kubectl(sim, "apply", "-f", str(DEPLOY / "crds"))
    lines = out.splitlines()
    assert len(lines) == len(crds), out
    assert all(line.startswith("customresourcedefinition.") for line in lines)
