"""GPU classes and node/cluster policies: models, their CRDs, and pure policy resolution.

- :mod:`.models`: the ``GPUClass``, ``GPUNodePolicy`` and ``ClusterGPUPolicy`` resources;
- :mod:`.woolyai`: WoolyAI's ``woolyai.dev`` kinds (``ClusterGPUPolicy``, ``WoolyNodePolicy``,
  ``GPUClass``) and their readers into the models above;
- :mod:`.crds`: the CRDs of both, generated from the models into ``deploy/crds/``;
- :mod:`.resolve`: a node's effective limits and the GPU classes its GPUs belong to;
- :mod:`.manager`: the scheduler's side (informers in, node limits, Events and status out).
"""
