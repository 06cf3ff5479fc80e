"""The known divergences (e2e/README.md) that the fidelity suite meets, as one function each.

A test compares what a backend answered with what the real kube-apiserver answers;
on the emulator, the answer first goes through `as_real_server_says`, which undoes
exactly the divergences listed in the README and nothing else. Removing a line here
(after fixing the emulator) makes the suite prove the fix.
"""

from __future__ import annotations

# A failed CEL rule on an object or list: kube-apiserver 1.36 leaves the value out
# ("Invalid value: <message>"), the emulator still writes its type as older servers did.
_CEL_OBJECT = ('Invalid value: "object": ', "Invalid value: ")
_CEL_ARRAY = ('Invalid value: "array": ', "Invalid value: ")
# A path under a group/version it does not serve: the real server's HTTP mux answers in
# plain text, the emulator with a JSON Status (both 404).
_NOT_SERVED = ("the server could not find the requested resource", "404 page not found\n")


def as_real_server_says(message: str, *, backend: str, code: int = 0) -> str:
    """`message` as kube-apiserver would have worded it (unchanged for the real backend)."""
    if backend == "real":
        return message
    for old, new in (_CEL_OBJECT, _CEL_ARRAY):
        message = message.replace(old, new)
    if code == 404 and message == _NOT_SERVED[0]:
        return _NOT_SERVED[1]
    return message
