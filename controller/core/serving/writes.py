"""The kinds a serving decision writes; the writes themselves are controller/core/writes.py's."""

from __future__ import annotations

from typing import Literal

from controller.core.writes import Create, Patch

ServingKind = Literal[
    "Secret",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Deployment",
    "Service",
    "NetworkPolicy",
    "HorizontalPodAutoscaler",
    "Certificate",
    "Ingress",
    "ModelDeployment",
    "Model",
]
Write = Create[ServingKind] | Patch[ServingKind]
