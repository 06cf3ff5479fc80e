"""Check (or rewrite) the files generated from the schemas: CRDs, contract schema, reference.

`python scripts/generated.py` rewrites them; `--check` exits 1 naming any stale file.
"""

from __future__ import annotations

import sys
from pathlib import Path

from controller.cli import CONTRACT_SCHEMA_FILE, schema_text
from controller.crds import CRD_DIR, crd_files
from controller.reference import resource_reference


def expected() -> dict[Path, str]:
    files = {CRD_DIR / name: text for name, text in crd_files().items()}
    files[CONTRACT_SCHEMA_FILE] = schema_text()
    files[Path("docs") / "resources.md"] = resource_reference()
    return files


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    stale = [p for p, text in expected().items() if _read(root / p) != text]
    if "--check" in sys.argv:
        for path in stale:
            print(f"{path} is stale: run `python scripts/generated.py`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in expected().items():
        (root / path).write_text(text)
        print(f"wrote {path}")
    return 0


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


if __name__ == "__main__":
    sys.exit(main())
