"""GPU classes and node/cluster policies: models, their CRDs, and pure policy resolution.

- :mod:`.models`: the ``GPUClass``, ``GPUNodePolicy`` and ``ClusterGPUPolicy`` resources;
- :mod:`.crds`: their CRDs, generated from the models into ``deploy/crds/``;
- :mod:`.resolve`: a node's effective limits and the GPU classes its GPUs belong to.
"""
