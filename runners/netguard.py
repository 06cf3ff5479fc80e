"""The network guard: networks the runner never connects to (contract `network.deniedCidrs`).

Why here, after DNS resolution, and not when a config is validated: a config names hosts,
and a name can resolve to anything, the cloud's metadata service (169.254.169.254) or a
node's link-local address included. The URL's text cannot tell; the address a connection
is about to use can. So every stack the runner speaks through checks the addresses it got
from DNS (controller setting DENIED_CIDRS, chart `runner.deniedCIDRs`):

- requests (http and krateo storage): runners/httpio.py's `GuardedAdapter`, whose urllib3
  connections resolve the host once with `Guard.resolve`, and connect to a checked address
  (no second lookup);
- http.client (the model REST clients): `Guard.attach` puts `Guard.create_connection`, the
  same resolve-check-connect, in place of `socket.create_connection`;
- gRPC: `Guard.check_host` before the channel opens (gRPC then resolves the name itself);
- botocore (S3): a `before-send` hook checks the host of every request (botocore's pool
  then resolves it itself);
- SQLAlchemy: a `do_connect` hook checks the host of every new connection (the driver then
  resolves it itself).

The last three check the name, then the library looks it up again: a DNS server that
answers differently the second time (rebinding) gets past them. The chart's egress
NetworkPolicy is what holds then (docs/security.md, "The network guard").

Rules:
- a name is refused when any of its addresses is denied, not only the first: which address
  a client tries is the DNS server's choice;
- an IPv6 address that carries an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, NAT64
  `64:ff9b::/96`, 6to4 `2002::/16`) is also checked as that IPv4 address, and `0.0.0.0`
  and `::`, which connect to this host, also as `127.0.0.1` and `::1`;
- loopback is allowed unless listed;
- a denied address is a ConfigError (exit 2): the config points at a place it may not go,
  which no retry changes;
- a check-only hook (gRPC, botocore, SQL) passes a name that does not resolve: the library
  then fails to connect and says so, as it would without a guard.
"""

from __future__ import annotations

import functools
import http.client
import ipaddress
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from runners.api import ConfigError, RunContext

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
AddrInfo = tuple[Any, ...]  # one entry of socket.getaddrinfo
SETTING = "the controller setting DENIED_CIDRS (chart runner.deniedCIDRs)"
Conn = TypeVar("Conn", bound=http.client.HTTPConnection)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LOOPBACK: dict[Address, Address] = {
    ipaddress.ip_address("0.0.0.0"): ipaddress.ip_address("127.0.0.1"),
    ipaddress.ip_address("::"): ipaddress.ip_address("::1"),
}


class NetworkDenied(ConfigError):
    """A connection would reach a denied network: exit 2, naming host, address and setting."""


@dataclass(frozen=True, slots=True)
class Guard:
    """The denied networks of one run; with none, every method lets everything through.

    `who` and `remedy` word a refusal for the program that holds the guard: the runner by
    default, `longrun-fetch` for a model download (runners/fetch_net.py)."""

    denied: tuple[Network, ...] = ()
    who: str = "runners"
    remedy: str = "point the config at another address"

    @classmethod
    def of(cls, ctx: RunContext) -> Guard:
        """The guard of a run (`ctx.denied_cidrs`, from the contract)."""
        return _parsed(tuple(ctx.denied_cidrs))

    @classmethod
    def of_cidrs(cls, cidrs: tuple[str, ...], *, who: str, remedy: str) -> Guard:
        """A guard of these networks (ValueError naming one that is not a CIDR)."""
        return Guard(_parsed(cidrs).denied, who, remedy)

    @property
    def is_active(self) -> bool:
        """True when some network is denied."""
        return bool(self.denied)

    def denied_by(self, address: str) -> Network | None:
        """The denied network holding `address` (or an address it stands for), else None."""
        for candidate in _meanings(ipaddress.ip_address(address.split("%", 1)[0])):
            for network in self.denied:
                if candidate.version == network.version and candidate in network:
                    return network
        return None

    def check_address(self, host: str, address: str) -> None:
        """NetworkDenied when `address` (which `host` resolved to) is denied."""
        network = self.denied_by(address)
        if network is None:
            return
        what = address if host == address else f"it resolves to {address}, which"
        raise NetworkDenied(
            f"connection to {host} refused: {what} is in {network}, a network {SETTING} "
            f"denies to {self.who}; {self.remedy}, or ask the cluster admin to allow it"
        )

    def resolve(self, host: str, port: int) -> list[AddrInfo]:
        """`socket.getaddrinfo(host, port)` for TCP, every address checked.

        Raises socket.gaierror when the name does not resolve, NetworkDenied when one of its
        addresses is denied.
        """
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        for info in infos:
            self.check_address(host, str(info[4][0]))
        return infos

    def check_host(self, host: str | None, port: int) -> None:
        """Check a host a library resolves again itself; a name that does not resolve passes
        (the library then fails to connect as it would without a guard)."""
        if not self.is_active or not host or host.startswith("/"):  # "/...": a Unix socket
            return
        try:
            self.resolve(host, port)
        except socket.gaierror:
            return

    def check_url(self, url: str) -> None:
        """`check_host` for the host and port of `url`."""
        parts = urlsplit(url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return  # not a URL any library will connect to
        self.check_host(parts.hostname, port)

    def check_authority(self, authority: str, *, default_port: int) -> None:
        """`check_host` for `host:port`, `[v6]:port` or `host` (a gRPC target)."""
        parts = urlsplit(f"//{authority}")
        try:
            port = parts.port or default_port
        except ValueError:
            return
        self.check_host(parts.hostname, port)

    def create_connection(
        self,
        address: tuple[str, int],
        timeout: float | None = None,
        source_address: tuple[str, int] | None = None,
    ) -> socket.socket:
        """`socket.create_connection` that connects only to checked addresses."""
        host, port = address
        error: OSError | None = None
        for _family, _type, _proto, _name, sockaddr in self.resolve(host, port):
            try:
                return socket.create_connection((sockaddr[0], sockaddr[1]), timeout, source_address)
            except OSError as exc:
                error = exc
        raise error or OSError(f"{host}: getaddrinfo returned no address")

    def attach(self, conn: Conn) -> Conn:
        """`conn`, made to connect through `create_connection` (HTTPConnection.connect, which
        HTTPSConnection's calls too, opens its socket with `_create_connection`)."""
        if self.is_active:
            conn._create_connection = self.create_connection  # type: ignore[attr-defined]
        return conn


NO_GUARD = Guard()


@functools.lru_cache(maxsize=8)
def _parsed(cidrs: tuple[str, ...]) -> Guard:
    return Guard(tuple(ipaddress.ip_network(c, strict=False) for c in cidrs))


def _meanings(address: Address) -> Iterator[Address]:
    """`address` and the addresses it reaches as well (see module doc)."""
    yield address
    if address in _LOOPBACK:
        yield _LOOPBACK[address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            yield address.ipv4_mapped
        if address.sixtofour is not None:
            yield address.sixtofour
        if address in _NAT64:
            yield ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)


# --- botocore and SQLAlchemy ----------------------------------------------------------------


def guard_boto_client(client: Any, guard: Guard) -> None:
    """Check the host of every request a botocore client sends (see module doc)."""
    if guard.is_active:

        def before_send(request: Any, **_: Any) -> None:
            guard.check_url(request.url)

        client.meta.events.register("before-send", before_send)


def guard_engine(engine: Any, guard: Guard) -> None:
    """Check the host of every new connection of a SQLAlchemy engine (see module doc)."""
    if not guard.is_active:
        return
    import sqlalchemy as sa  # only the sql backend pays for importing it

    default_port = engine.url.port or 0

    def do_connect(_dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
        hosts = str(cparams.get("host") or "")
        port = int(cparams.get("port") or default_port)
        for host in filter(None, (h.strip() for h in hosts.split(","))):
            guard.check_host(host, port)

    sa.event.listen(engine, "do_connect", do_connect)
