"""The Kubernetes adapter: the only package that imports the `kubernetes` client.

`transport` sends raw JSON requests, `informers` keeps list+watch caches,
`cached` is what both adapters share (the caches of their kinds, their writes),
`kept` says what the run caches hold of an object, `cluster` implements the
core's `Cluster` port and `serving` the `ServingCluster` port on them, and
`election` holds the leader Lease.
"""

from controller.kube.cluster import KubeCluster
from controller.kube.election import Elector
from controller.kube.transport import Transport, load_api_client, with_pool_size

__all__ = ["Elector", "KubeCluster", "Transport", "load_api_client", "with_pool_size"]
