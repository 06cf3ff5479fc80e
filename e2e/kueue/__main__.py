"""`python -m e2e.kueue`: where Kueue's manager is (exit 0), or why not (exit 1).

scripts/test asks it before running tests/kueue in its real-backend pass.
"""

from __future__ import annotations

from e2e.kueue.assets import KueueNotFound, find_kueue


def main() -> int:
    try:
        assets = find_kueue()
    except KueueNotFound as exc:
        print(exc)
        return 1
    print(f"v{assets.version} from {assets.directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
