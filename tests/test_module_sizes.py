"""Product modules stay small enough to read: none over 400 lines (issue 16's bar).

Real: the repository's own files. Faked: nothing.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("batchapi", "contracts", "controller", "local", "runners")
LIMIT = 400


def test_no_product_module_is_over_400_lines() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
    }
    too_long = {name: lines for name, lines in sizes.items() if lines > LIMIT}
    assert not too_long, f"split these modules (at most {LIMIT} lines): {too_long}"
