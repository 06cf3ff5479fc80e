"""Where Kueue's manager is: `KUEUE_ASSETS`, the same convention as `KUBEBUILDER_ASSETS`.

Kueue's manager is built outside the repository, as the control plane is (no package registry
we install from carries it), into `~/.local/share/kueue/<version>/`:
- `kueue`: the manager binary (`cmd/kueue`);
- `crds/`: its CustomResourceDefinitions (YAML);
- `webhook/`: its webhook configuration manifests (Mutating/ValidatingWebhookConfiguration);
- `config/`: an example of its Configuration (read for reference only; e2e/kueue/manager.py
  writes its own).
`$KUEUE_ASSETS`, when set, is the only place looked at; otherwise the newest version
directory (versions compared numerically, a leading `v` ignored) holding `kueue` and `crds/`.

Why its absence is a plain skip, even in CI, exactly like the control plane's (e2e/backends.py):
CI machines do not carry it, so a missing Kueue is the expected state there. Every such skip is
one line starting with `kueue:` and naming KUEUE_ASSETS; tests/conftest.py reports it in the
summary. A Kueue that is found but does not start is a failure, never a skip.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

ENV_VAR = "KUEUE_ASSETS"
DEFAULT_ROOT = Path("~/.local/share/kueue")
SKIP_PREFIX = "kueue:"


class KueueNotFound(LookupError):
    """No directory with Kueue's manager and CRDs; the message is one line naming KUEUE_ASSETS."""


@dataclass(frozen=True)
class KueueAssets:
    """A directory holding Kueue's manager, its CRDs and its webhook manifests."""

    directory: Path

    @property
    def binary(self) -> Path:
        return self.directory / "kueue"

    @property
    def crd_files(self) -> list[Path]:
        return sorted(p for p in (self.directory / "crds").glob("*.y*ml"))

    @property
    def webhook_files(self) -> list[Path]:
        return sorted(p for p in (self.directory / "webhook").glob("*.y*ml"))

    @property
    def is_complete(self) -> bool:
        binary = self.binary
        return binary.is_file() and os.access(binary, os.X_OK) and bool(self.crd_files)

    @property
    def version(self) -> str:
        """The version the directory's name announces (`v0.13.1` → `0.13.1`)."""
        match = re.match(r"v?(\d+(?:\.\d+)*)", self.directory.name)
        return match.group(1) if match else self.directory.name


def _version_key(path: Path) -> tuple[int, ...]:
    match = re.match(r"v?(\d+(?:\.\d+)*)", path.name)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def find_kueue(environ: dict[str, str] | None = None, *, root: Path | None = None) -> KueueAssets:
    """The Kueue to use: `$KUEUE_ASSETS`, else the newest complete version dir under root."""
    environ = dict(os.environ) if environ is None else environ
    named = environ.get(ENV_VAR, "").strip()
    if named:
        assets = KueueAssets(Path(named).expanduser())
        if assets.is_complete:
            return assets
        raise KueueNotFound(_not_found(f"${ENV_VAR}={named}"))
    root = root or DEFAULT_ROOT.expanduser()
    candidates = sorted(
        (KueueAssets(p) for p in root.glob("*") if p.is_dir()),
        key=lambda a: _version_key(a.directory),
        reverse=True,
    )
    for assets in candidates:
        if assets.is_complete:
            return assets
    raise KueueNotFound(_not_found(f"${ENV_VAR} (unset) or {root}"))


def _not_found(where: str) -> str:
    return (
        f"{SKIP_PREFIX} no kueue manager with crds/ in {where}; "
        f"set {ENV_VAR} to a directory holding them to run"
    )


@dataclass
class KueueStatus:
    """What happened to Kueue in this process, for the end-of-session summary."""

    outcome: str = ""  # "", "ran" or "skipped"
    detail: str = ""


KUEUE_STATUS = KueueStatus()


def skip_kueue(reason: str) -> NoReturn:
    """Skip (also in CI) because Kueue's manager is not on this machine."""
    import pytest

    KUEUE_STATUS.outcome, KUEUE_STATUS.detail = "skipped", reason.removeprefix(SKIP_PREFIX).strip()
    pytest.skip(reason)
