"""A node agent that plays the kubelet over the API only (see agent.py and e2e/README.md).

`NodeAgent(AgentConfig(workdir=...), Kube.from_kubeconfig(path)).start()` in a
test, `python -m e2e.nodeagent --kubeconfig PATH` beside a control plane.
"""

from .agent import NodeAgent
from .config import AgentConfig, default_images
from .kube import ApiError, Kube
from .scripted import ScriptedPods

__all__ = ["AgentConfig", "ApiError", "Kube", "NodeAgent", "ScriptedPods", "default_images"]
