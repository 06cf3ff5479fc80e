"""Where the control-plane binaries are: the envtest convention.

controller-runtime's envtest reads `KUBEBUILDER_ASSETS`, a directory holding
etcd, kube-apiserver (and, for us, kube-controller-manager and kubectl);
`setup-envtest` installs them under `~/.local/share/kubebuilder-envtest/k8s/
<version>-<os>-<arch>/`. We honour both, the variable first: when it is set, it
is the only place looked at, so a developer pinning a version never gets another.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "KUBEBUILDER_ASSETS"
DEFAULT_ROOT = Path("~/.local/share/kubebuilder-envtest/k8s")
REQUIRED = ("etcd", "kube-apiserver")
OPTIONAL = ("kube-controller-manager", "kubectl")


class AssetsNotFound(LookupError):
    """No directory with etcd and kube-apiserver; the message is one line naming where we looked."""


@dataclass(frozen=True)
class Assets:
    """A directory of control-plane binaries; optional ones may be absent."""

    directory: Path

    def binary(self, name: str) -> Path | None:
        """The executable `name` in this directory, or None."""
        path = self.directory / name
        return path if path.is_file() and os.access(path, os.X_OK) else None

    @property
    def missing(self) -> list[str]:
        """Names of the binaries (required or optional) this directory lacks."""
        return [name for name in (*REQUIRED, *OPTIONAL) if self.binary(name) is None]

    @property
    def is_complete(self) -> bool:
        return not any(name in self.missing for name in REQUIRED)

    @property
    def has_controller_manager(self) -> bool:
        return self.binary("kube-controller-manager") is not None

    @property
    def version(self) -> str:
        """The version the directory's name announces (`1.36.2-linux-amd64` → `1.36.2`)."""
        match = re.match(r"(\d+(?:\.\d+)*)", self.directory.name)
        return match.group(1) if match else self.directory.name


def _version_key(path: Path) -> tuple[int, ...]:
    """Numeric sort key: 1.9.0 < 1.10.0 < 1.36.2; names without a version sort first."""
    match = re.match(r"(\d+(?:\.\d+)*)", path.name)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def default_root() -> Path:
    return DEFAULT_ROOT.expanduser()


def find_assets(environ: dict[str, str] | None = None, *, root: Path | None = None) -> Assets:
    """The assets to use: `$KUBEBUILDER_ASSETS`, else the newest complete version dir under root."""
    environ = dict(os.environ) if environ is None else environ
    named = environ.get(ENV_VAR, "").strip()
    if named:
        assets = Assets(Path(named).expanduser())
        if assets.is_complete:
            return assets
        raise AssetsNotFound(_not_found(f"${ENV_VAR}={named}"))
    root = root or default_root()
    candidates = sorted(
        (Assets(p) for p in root.glob("*") if p.is_dir()),
        key=lambda a: _version_key(a.directory),
        reverse=True,
    )
    for assets in candidates:
        if assets.is_complete:
            return assets
    raise AssetsNotFound(_not_found(f"${ENV_VAR} (unset) or {root}"))


def _not_found(where: str) -> str:
    return (
        f"real control plane: no kube-apiserver/etcd in {where}; "
        f"set {ENV_VAR} to a directory holding them to run"
    )
