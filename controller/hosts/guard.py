"""Connections to hosts, only to addresses the rules allow (controller/core/fleets/addresses.py).

A host names its endpoint, and a name can resolve to anything: so the name is resolved
once here, every address it resolves to is checked (one refused address refuses the name:
which one a client tries is the DNS server's choice), and the socket connects to a checked
address, never resolving again (no DNS rebinding between check and connect).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from controller.core.fleets.addresses import address_problem


class AddressRefused(Exception):
    """The host's endpoint resolves to an address no host may have; no retry changes it."""


@dataclass(frozen=True)
class HostGuard:
    """The networks host connections may not (`denied`) or must (`allowed`) reach."""

    denied: tuple[str, ...] = ()
    allowed: tuple[str, ...] = ()

    def resolve(self, host: str, port: int) -> list[str]:
        """The addresses `host` resolves to, all checked; AddressRefused naming the first
        refused one, OSError when the name does not resolve."""
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in addresses:
            problem = address_problem(address, denied=self.denied, allowed=self.allowed)
            if problem is not None:
                named = address if address == host else f"{host} resolves to {address}, which"
                raise AddressRefused(f"{named} is refused: {problem.split(' is ', 1)[1]}")
        return addresses

    def connect(self, host: str, port: int, timeout: float) -> tuple[socket.socket, str]:
        """A TCP connection to a checked address of `host`, and that address."""
        error: OSError | None = None
        for address in self.resolve(host, port):
            try:
                return socket.create_connection((address, port), timeout), address
            except OSError as exc:
                error = exc
        raise error or OSError(f"{host}: no address")
