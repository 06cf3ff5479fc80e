"""longrun's schemas: the custom resources and the runner contract.

Pure pydantic models, no I/O: the controller and the runners meet only here.
"""

from contracts.base import Condition, SecretKeyRef
from contracts.config import InferenceConfigSpec, InferenceConfigStatus, RunnerTuning
from contracts.contract import RunnerContract, contract_json_schema
from contracts.model import DeploymentRef, KServeBlock, ModelBlock, ModelEndpoint
from contracts.resources import (
    API_VERSION,
    GROUP,
    VERSION,
    InferenceConfig,
    InferenceRun,
)
from contracts.run import InferenceRunSpec, InferenceRunStatus, RunResult
from contracts.storage import StorageSpec

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "Condition",
    "DeploymentRef",
    "InferenceConfig",
    "InferenceConfigSpec",
    "InferenceConfigStatus",
    "InferenceRun",
    "InferenceRunSpec",
    "InferenceRunStatus",
    "KServeBlock",
    "ModelBlock",
    "ModelEndpoint",
    "RunResult",
    "RunnerContract",
    "RunnerTuning",
    "SecretKeyRef",
    "StorageSpec",
    "contract_json_schema",
]
