"""The gpusched node agent: reads the node's GPUs from NVML (:mod:`.discovery`)."""

from gpusched.agent.discovery import AgentError, discover

__all__ = ["AgentError", "discover"]
