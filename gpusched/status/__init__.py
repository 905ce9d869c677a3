"""``gpusched status``: what is on the GPUs, from nodes, inventories and pods.

:mod:`.model` builds a :class:`ClusterStatus` from listed objects (pure), :mod:`.render`
prints it (table, wide, JSON, YAML), :mod:`.command` lists (and watches) the cluster.
"""

from gpusched.status.model import ClusterStatus, build_status
from gpusched.status.render import render

__all__ = ["ClusterStatus", "build_status", "render"]
