"""End-to-end harness: the whole system on one machine (not shipped in the wheel)."""
