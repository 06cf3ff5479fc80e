"""Pure decisions: observed state in, desired children and status out.

No I/O, no clock, no client: everything here is tested from plain data.
"""
