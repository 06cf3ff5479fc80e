"""Label selectors as Kubernetes evaluates them (metav1.LabelSelector), on plain labels."""

from __future__ import annotations

from collections.abc import Mapping

from contracts.fleets import HostSelector


def matches(selector: HostSelector, labels: Mapping[str, str]) -> bool:
    """True when `labels` satisfy every matchLabels entry and every expression."""
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    for expression in selector.match_expressions:
        present = expression.key in labels
        value = labels.get(expression.key)
        ok = {
            "In": present and value in expression.values,
            "NotIn": not present or value not in expression.values,
            "Exists": present,
            "DoesNotExist": not present,
        }[expression.operator]
        if not ok:
            return False
    return True
