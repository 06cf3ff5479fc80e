"""Where a ModelDeployment's pods run: resources and accelerators, affinity, topology spread.

The shapes are Kubernetes' own (core/v1 Affinity, TopologySpreadConstraint), so a manifest
that works on a Deployment works here, with two things left out on purpose:
- pod (anti-)affinity terms have no `namespaces` or `namespaceSelector`: they look at the
  deployment's own namespace only, so a deployment cannot steer towards or away from other
  tenants' pods;
- a spread constraint without a `labelSelector` spreads the deployment's own pods (the
  controller fills in its pods' labels), which is what one nearly always means.

Which node labels and topology keys a deployment may name, which PriorityClasses,
RuntimeClasses and accelerator resources it may ask for, is the controller's policy
(controller/core/serving/placement.py): allow-lists, as for tolerations.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from contracts.base import Schema
from contracts.config import LabelValue, Quantity

# A qualified name: an optional DNS-subdomain prefix and a name (a label key, a resource).
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=316)]
# An extended resource, domain-prefixed: nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915.
RESOURCE_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
ResourceName = Annotated[str, StringConstraints(max_length=253, pattern=RESOURCE_NAME)]


class ServingResources(Schema):
    """CPU, memory and accelerators of each model server pod."""

    cpu: Quantity | None = Field(default=None, description="CPU request, e.g. 2 or 500m.")
    memory: Quantity | None = Field(
        default=None, description="Memory request, also the limit unless memoryLimit is set."
    )
    cpu_limit: Quantity | None = Field(default=None, description="CPU limit; default: none.")
    memory_limit: Quantity | None = Field(default=None, description="Memory limit.")
    gpu: int = Field(
        default=0, ge=0, le=16, description="Accelerators per pod (of resource gpuResource)."
    )
    gpu_resource: ResourceName | None = Field(
        default=None,
        description=(
            "The accelerator's extended resource, e.g. nvidia.com/gpu, amd.com/gpu, "
            "gpu.intel.com/i915; default: the controller's (chart serving.gpu.resourceName)."
        ),
    )


class LabelSelectorRequirement(Schema):
    """A label selector expression."""

    key: LabelKey = Field(description="Label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="Operator.")
    values: list[LabelValue] = Field(default_factory=list, max_length=64, description="Values.")


class LabelSelector(Schema):
    """Pods by their labels (the deployment's namespace only)."""

    match_labels: dict[str, LabelValue] = Field(
        default_factory=dict, description="Labels the pods have."
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=16, description="Expressions the pods' labels satisfy."
    )


class NodeSelectorRequirement(Schema):
    """A node selector expression."""

    key: LabelKey = Field(description="Node label key (matchFields: metadata.name).")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(
        description="Operator."
    )
    values: list[LabelValue] = Field(default_factory=list, max_length=64, description="Values.")


class NodeSelectorTerm(Schema):
    """Nodes matching every expression of the term."""

    match_expressions: list[NodeSelectorRequirement] = Field(
        default_factory=list, max_length=16, description="By node labels."
    )
    match_fields: list[NodeSelectorRequirement] = Field(
        default_factory=list, max_length=16, description="By node fields."
    )


class NodeSelector(Schema):
    """Nodes matching any of the terms."""

    node_selector_terms: list[NodeSelectorTerm] = Field(
        min_length=1, max_length=16, description="Terms, ORed."
    )


class PreferredSchedulingTerm(Schema):
    """A preference for nodes, with its weight."""

    weight: int = Field(ge=1, le=100, description="Weight, 1-100.")
    preference: NodeSelectorTerm = Field(description="The nodes preferred.")


class NodeAffinity(Schema):
    """Which nodes the pods must or should run on."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        default=None, description="Nodes the pods must run on."
    )
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = Field(
        default_factory=list, max_length=16, description="Nodes the pods should run on."
    )


class PodAffinityTerm(Schema):
    """Pods of the deployment's namespace, and the topology domain that counts as 'near'."""

    label_selector: LabelSelector | None = Field(default=None, description="The pods.")
    topology_key: LabelKey = Field(description="Node label whose value is the domain.")


class WeightedPodAffinityTerm(Schema):
    """A pod affinity term with its weight."""

    weight: int = Field(ge=1, le=100, description="Weight, 1-100.")
    pod_affinity_term: PodAffinityTerm = Field(description="The term.")


class PodAffinity(Schema):
    """Run near (or, as anti-affinity, away from) other pods of the namespace."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = Field(
        default_factory=list, max_length=16, description="Terms that must hold."
    )
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = Field(
        default_factory=list, max_length=16, description="Terms that should hold."
    )


class Affinity(Schema):
    """Node affinity, pod affinity and pod anti-affinity (core/v1 Affinity)."""

    node_affinity: NodeAffinity | None = Field(default=None, description="Node affinity.")
    pod_affinity: PodAffinity | None = Field(default=None, description="Pod affinity.")
    pod_anti_affinity: PodAffinity | None = Field(
        default=None, description="Pod anti-affinity, e.g. one replica per node."
    )


class TopologySpreadConstraint(Schema):
    """Spread the pods over a topology (core/v1 TopologySpreadConstraint)."""

    max_skew: int = Field(ge=1, le=1000, description="Most pods one domain may have over another.")
    topology_key: LabelKey = Field(description="Node label whose value is the domain.")
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(
        description="DoNotSchedule or ScheduleAnyway."
    )
    label_selector: LabelSelector | None = Field(
        default=None, description="The pods counted; default: the deployment's own."
    )
    min_domains: int | None = Field(default=None, ge=1, le=1000, description="Fewest domains.")
    node_affinity_policy: Literal["Honor", "Ignore"] | None = Field(
        default=None, description="Whether the pods' node affinity limits the domains."
    )
    node_taints_policy: Literal["Honor", "Ignore"] | None = Field(
        default=None, description="Whether node taints limit the domains."
    )


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def affinity_keys(affinity: Affinity | None) -> list[tuple[str, str]]:
    """(field under `affinity`, key) of every node label key and topology key it names."""
    if affinity is None:
        return []
    found = _node_keys(affinity.node_affinity)
    for name, pods in (
        ("podAffinity", affinity.pod_affinity),
        ("podAntiAffinity", affinity.pod_anti_affinity),
    ):
        if pods is None:
            continue
        for i, term in enumerate(pods.required_during_scheduling_ignored_during_execution):
            found.append((f"{name}.{REQUIRED}[{i}].topologyKey", term.topology_key))
        for i, weighted in enumerate(pods.preferred_during_scheduling_ignored_during_execution):
            key = weighted.pod_affinity_term.topology_key
            found.append((f"{name}.{PREFERRED}[{i}].podAffinityTerm.topologyKey", key))
    return found


def _node_keys(node: NodeAffinity | None) -> list[tuple[str, str]]:
    if node is None:
        return []
    required = node.required_during_scheduling_ignored_during_execution
    terms = [
        (f"{REQUIRED}.nodeSelectorTerms[{i}]", term)
        for i, term in enumerate(required.node_selector_terms if required else [])
    ]
    terms += [
        (f"{PREFERRED}[{i}].preference", pref.preference)
        for i, pref in enumerate(node.preferred_during_scheduling_ignored_during_execution)
    ]
    return [
        (f"nodeAffinity.{where}.{kind}[{j}].key", expr.key)
        for where, term in terms
        for kind, exprs in (
            ("matchExpressions", term.match_expressions),
            ("matchFields", term.match_fields),
        )
        for j, expr in enumerate(exprs)
    ]
