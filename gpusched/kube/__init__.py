"""Talking to the Kubernetes API: the only layer of gpusched that imports kubernetes_asyncio.

- ``errors``    gpusched's API error hierarchy, wrapping the HTTP client's exceptions.
- ``client``    ``Kube``: a thin JSON client over kubernetes-asyncio's ``ApiClient`` (auth, TLS
  and connection pooling are the client's; bodies stay plain dicts, which is several times
  faster than its generated models on list and watch hot paths), and kubeconfig loading.
- ``reflector`` list-then-watch with resume, 410 re-list and reconnect backoff.
- ``workqueue`` client-go's rate-limited delaying work queue and its ``workqueue_*`` metrics.
- ``controller`` the run loop of gpusched's controllers: informers, workers, retries.
"""

from gpusched.kube.client import Kube, connect
from gpusched.kube.errors import (
    APIClientError,
    APIConflict,
    APIError,
    APIForbidden,
    APIGone,
    APINotFound,
    APIServerError,
    APITooManyRequests,
)

__all__ = [
    "APIClientError",
    "APIConflict",
    "APIError",
    "APIForbidden",
    "APIGone",
    "APINotFound",
    "APIServerError",
    "APITooManyRequests",
    "Kube",
    "connect",
]
