"""`python -m runners.tokencheck`."""

from runners.tokencheck import console

console()
