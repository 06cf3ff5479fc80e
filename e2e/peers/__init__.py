"""Real model servers from PyPI, each in its own cached virtualenv, for tests and benchmarks.

Why: the runner's behaviour against KServe, MLServer, Triton and llama.cpp is what matters, and
mocks drift from the real servers. Their pins conflict with each other and with the project, so
each server runs from its own env (built once, see ``envs``) as a separate process group (see
``server``). ``python -m e2e.peers`` prepares, lists and serves them; ``e2e.peers.fixtures`` has
the pytest fixtures.
"""

from e2e.peers.envs import EnvBuildError, PreparedEnv, cache_root, ensure_env
from e2e.peers.server import PeerServer, PeerStartError, start
from e2e.peers.specs import ENVS, SERVERS, EnvSpec, ServerSpec, UnknownPeerError

__all__ = [
    "ENVS",
    "SERVERS",
    "EnvBuildError",
    "EnvSpec",
    "PeerServer",
    "PeerStartError",
    "PreparedEnv",
    "ServerSpec",
    "UnknownPeerError",
    "cache_root",
    "ensure_env",
    "start",
]
