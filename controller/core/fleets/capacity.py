"""Host capacity in numbers: Kubernetes quantities parsed, added and printed (pure).

A host's room is `capacity.slots` and/or `capacity.memory`; each replica takes its
InferenceModel's `resources` (slots default 1; memory only if set). A dimension the host
does not declare is not counted; a host that counts memory takes only replicas that say
how much they need (an unknown size could not be checked against what is left).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

_SUFFIX = {
    "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|[kMGTPE]i?|[eE][0-9]+)?$")


def parse_quantity(value: int | str | None) -> Decimal | None:
    """The quantity as a number (bytes for memory); None when absent or not a quantity."""
    if value is None:
        return None
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        return None
    number, suffix = Decimal(match[1]), match[2] or ""
    if suffix == "m":
        return number / 1000
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def format_bytes(value: Decimal) -> str:
    """Bytes as the largest binary unit that divides them (24Gi, 512Mi, 1000)."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _SUFFIX[suffix]
        if value >= unit and value % unit == 0:
            return f"{int(value // unit)}{suffix}"
    return str(int(value))


@dataclass(frozen=True)
class Room:
    """Slots and memory (bytes); None: the dimension is not counted."""

    slots: int | None = None
    memory: Decimal | None = None

    def minus(self, slots: int, memory: Decimal | None) -> Room:
        """What is left after a replica taking `slots` and `memory`."""
        left_memory = None if self.memory is None else self.memory - (memory or 0)
        left_slots = None if self.slots is None else self.slots - slots
        return Room(left_slots, left_memory)

    def fits(self, slots: int, memory: Decimal | None) -> bool:
        """True when a replica taking `slots` and `memory` fits in what is left."""
        slots_fit = self.slots is None or slots <= self.slots
        memory_fits = self.memory is None or (memory is not None and memory <= self.memory)
        return slots_fit and memory_fits

    def share(self, total: Room) -> float:
        """The smaller fraction left of the counted dimensions (1.0: all free)."""
        parts = []
        if self.slots is not None and total.slots:
            parts.append(self.slots / total.slots)
        if self.memory is not None and total.memory:
            parts.append(float(self.memory / total.memory))
        return min(parts) if parts else 1.0
