"""Fixtures for the tests with Kueue: the whole system on a real control plane, Kueue running.

Real: everything (tests/kueue/test_queued_runs.py says what). Kueue needs a real control plane
(no emulator runs it), so these tests are collected only in scripts/test's real-backend pass,
`LONGRUN_KUBE_BACKEND=real pytest tests/kueue`; the emulator pass leaves them out rather than
run them twice on a 2-core machine.
"""

from __future__ import annotations

from e2e.backends import selected_backend
from e2e.kueue.fixtures import kueue_assets, start_queued_system

__all__ = ["kueue_assets", "start_queued_system"]

collect_ignore_glob = [] if selected_backend() == "real" else ["test_*.py"]
