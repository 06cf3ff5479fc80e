"""Which addresses a host may have: the rules every host connection and slice address obeys.

An InferenceHost makes the controller send HTTP requests to a place a tenant chooses, from
the controller's own network position: server-side request forgery unless it is fenced.
So, after DNS resolution (a name can point anywhere), every address the controller would
connect to, and every address it would publish in an EndpointSlice, must be:

- not loopback, link-local, unspecified or multicast, ever (the controller would call
  itself, its node, or the cloud's metadata service at 169.254.169.254; kube-apiserver
  refuses such EndpointSlice addresses anyway): no setting allows them;
- outside DENIED_CIDRS, the networks runner pods never reach either;
- inside FLEET_ALLOWED_CIDRS when that is set (empty: anywhere not denied).

An IPv6 address carrying an IPv4 one (IPv4-mapped, NAT64, 6to4) is also judged as that
IPv4 address, as the runner's guard does (runners/netguard.py).
"""

from __future__ import annotations

import functools
import ipaddress

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
DENIED_SETTING = "the controller setting DENIED_CIDRS (chart runner.deniedCIDRs)"
ALLOWED_SETTING = "the controller setting FLEET_ALLOWED_CIDRS (chart fleets.allowedCIDRs)"


def meanings(address: Address) -> list[Address]:
    """`address` and the IPv4 address it carries, if any."""
    found: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            found.append(address.sixtofour)
        if address in _NAT64:
            found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _local_kind(address: Address) -> str | None:
    checks = (
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_unspecified, "the unspecified address"),
        (address.is_multicast, "a multicast address"),
    )
    return next((what for failed, what in checks if failed), None)


@functools.lru_cache(maxsize=32)
def _networks(cidrs: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def _within(address: Address, networks: tuple[Network, ...]) -> Network | None:
    return next(
        (n for n in networks for a in meanings(address) if a.version == n.version and a in n),
        None,
    )


def address_problem(
    text: str, *, denied: tuple[str, ...] = (), allowed: tuple[str, ...] = ()
) -> str | None:
    """Why a host may not have the address `text` (one line, naming the rule), or None."""
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return f"{text} is not an IP address"
    local = next((k for a in meanings(address) if (k := _local_kind(a))), None)
    if local is not None:
        return f"{text} is {local}, which no InferenceHost may have"
    network = _within(address, _networks(denied))
    if network is not None:
        return f"{text} is in {network}, a network {DENIED_SETTING} denies"
    if allowed and _within(address, _networks(allowed)) is None:
        return f"{text} is outside the networks {ALLOWED_SETTING} allows ({', '.join(allowed)})"
    return None


def family(text: str) -> str:
    """`IPv4` or `IPv6`: an EndpointSlice's addressType for the address."""
    return "IPv6" if ipaddress.ip_address(text.split("%", 1)[0]).version == 6 else "IPv4"
