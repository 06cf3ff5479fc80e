"""Fixtures for the security suite: RBAC and PodSecurity, once per backend.

Real: both backends — the API emulator and, when its binaries are found, a private
kube-apiserver (RBAC authorization, PodSecurity admission) with kube-controller-manager
(e2e/real) — each with longrun's CRDs installed. Faked: nothing; the emulator's RBAC and
PodSecurity must answer as the real server does.
"""

from __future__ import annotations

from e2e.fixtures import *  # noqa: F403
