"""`python -m e2e.real`: where the control plane's binaries are (exit 0), or why not (exit 1).

scripts/test asks it before its real-backend pass.
"""

from __future__ import annotations

from e2e.real.assets import AssetsNotFound, find_assets


def main() -> int:
    try:
        assets = find_assets()
    except AssetsNotFound as exc:
        print(exc)
        return 1
    if not assets.has_controller_manager:
        print(f"real control plane: no kube-controller-manager in {assets.directory}")
        return 1
    print(f"v{assets.version} from {assets.directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
