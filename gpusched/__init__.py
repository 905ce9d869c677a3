"""gpusched: a Kubernetes scheduler for GPU pods.

The tree shows the architecture:

- ``gpusched/``      the core: API client helpers, the GPU inventory format, the CLI;
  ``gpusched.sim`` is a simulated Kubernetes API server with kubelets and GPU fleets.
- ``plugins/``       built-in scheduler plugins, one file each (installed as ``gpusched.plugins``).
- ``topology/``      the NVLink/PCIe graph model and GPU-set selection, pure Python over networkx
  with no Kubernetes imports (installed as ``gpusched.topology``).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
