"""A simulated GPU cluster: a Kubernetes API server on loopback, kubelets and GPU fleets.

- ``server``/``registry``/``store``  the API server (REST semantics of kube-apiserver);
- ``kinds``, ``crd``, ``patch``, ``selectors``  per-kind strategies, CRD schemas, patch types,
  label/field selectors, each following its upstream counterpart;
- ``field``, ``errors``  apimachinery's field errors and the Status of every failure;
- ``admission``  admission webhooks (Mutating/ValidatingWebhookConfiguration) the server calls;
- ``quota``, ``scheduling``, ``policy``  ResourceQuota; PriorityClass and the gang objects;
  PodDisruptionBudgets, their controller and the eviction subresource;
- ``faults``  injected errors, latency and cut watch streams;
- ``kubelet``  simulated kubelets (an API client, usable against real clusters too);
- ``fleet``  GPU fleet specs and their nodes and inventories;
- ``webhook``  gpusched's admission webhook served in-process and registered (opt-in);
- ``cluster``  ``SimCluster``, everything above started together.
"""

from gpusched.sim.cluster import SimCluster
from gpusched.sim.faults import FaultRule, Faults, parse_faults
from gpusched.sim.server import APIServer

__all__ = ["APIServer", "FaultRule", "Faults", "SimCluster", "parse_faults"]
