"""What the client benchmarks measure: records, wall time, CPU of this process and the server's.

Shared by runner_throughput.py and runner_end_to_end.py, so that "CPU µs per record" means the
same in both: the server's CPU is read from /proc for its whole process group (a model server
may run workers), this process's from `time.process_time`.
"""

from __future__ import annotations

import os
from dataclasses import astuple, dataclass
from pathlib import Path


@dataclass
class Measure:
    """What one client (or program) did: records, seconds, CPU seconds, failed calls."""

    records: int
    seconds: float
    cpu: float  # of the client process
    server_cpu: float  # of the server's process group
    errors: int = 0

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    def cpu_per_k(self, cpu: float | None = None) -> float:
        """CPU milliseconds per 1,000 records (= µs per record): this process's, or `cpu`'s."""
        used = self.cpu if cpu is None else cpu
        return used / self.records * 1e6 if self.records else float("nan")

    def __add__(self, other: Measure) -> Measure:
        return Measure(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


def group_cpu(pgid: int) -> float:
    """CPU seconds (user+system) used so far by every process in group `pgid`."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")
