"""GPUWorkload (``gpu.warp.dev/v1alpha1``, seed GPU_Orchestrator's API): the pure manager that
decides (``manager``) and the controller that reconciles (``controller``); docs/gpuworkload.md."""

from gpusched.workloads.controller import WorkloadController, WorkloadMetrics
from gpusched.workloads.manager import (
    Plan,
    Settings,
    SpecError,
    WorkloadSpec,
    parse_spec,
    reconcile,
)

__all__ = [
    "Plan",
    "Settings",
    "SpecError",
    "WorkloadController",
    "WorkloadMetrics",
    "WorkloadSpec",
    "parse_spec",
    "reconcile",
]
