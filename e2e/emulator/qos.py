"""Pod QoS class, as kube-apiserver records it in `status.qosClass` on create.

Follows pkg/apis/core/helper/qos ComputePodQOS: only cpu and memory count, zero
quantities are ignored, init containers count like containers. Guaranteed needs
cpu and memory limits on every container and requests equal to limits.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

Obj = dict[str, Any]
_SCALE = {
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: Decimal(10) ** (3 * (i - 3)) for i, s in enumerate("num kMGTPE") if s != " "},
    "": Decimal(1),
}
_QUANTITY = re.compile(r"([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]?)")


def parse_quantity(value: Any) -> Decimal:
    """resource.Quantity as a number ("500m" -> 0.5, "1Gi" -> 1073741824); 0 if unparsable."""
    match = _QUANTITY.fullmatch(str(value).strip())
    if match is None:
        return Decimal(0)
    number, suffix = match.groups()
    try:
        if suffix in _SCALE:
            return Decimal(number) * _SCALE[suffix]
        return Decimal(number + suffix)  # decimal exponent, "1e3"
    except InvalidOperation:
        return Decimal(0)


def pod_qos(spec: Obj) -> str:
    """Guaranteed, Burstable or BestEffort for a (defaulted) pod spec."""
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = c.get("resources") or {}
        _add(requests, resources.get("requests"))
        if not {"cpu", "memory"} <= _add(limits, resources.get("limits")):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed and requests == limits else "Burstable"


def _add(total: dict[str, Decimal], quantities: Obj | None) -> set[str]:
    """Sum the positive cpu/memory quantities into total; return the names seen."""
    seen = set()
    for name, value in (quantities or {}).items():
        amount = parse_quantity(value)
        if name in ("cpu", "memory") and amount > 0:
            total[name] = total.get(name, Decimal(0)) + amount
            seen.add(name)
    return seen
