"""The one rule for "are we in CI?": tests skip locally, but fail in CI, when a service is missing.

CI is set up to have every service (PostgreSQL, MariaDB, kubectl, the model servers), so a
skip there would hide a broken setup; a developer's laptop may lack some of them.
"""

from __future__ import annotations

import os

NOT_CI = ("", "0", "false", "no")


def is_ci() -> bool:
    """True when ``$CI`` is set to anything but empty, "0", "false" or "no"."""
    return os.environ.get("CI", "").strip().lower() not in NOT_CI
