"""Fixtures: the API emulator (e2e.fixtures)."""

from e2e.fixtures import *  # noqa: F403
