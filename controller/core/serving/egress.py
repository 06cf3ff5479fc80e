"""Where a model-server pod may connect to: the egress rules of its NetworkPolicy.

A runner checks every address it connects to against DENIED_CIDRS itself (runners/netguard.py).
A model server is third-party code that checks nothing, so for its pods the same networks are
closed by the kernel instead: the deployment's NetworkPolicy (network.py) carries one of two
egress rule sets, and nothing else selects the pods for egress (NetworkPolicies add up: a second
policy allowing more would undo the first).

- **Deny mode** (the default, when DENIED_CIDRS is not empty): every address except the denied
  networks, plus DNS (port 53) to any address. DNS stays open as it is for runners, whose
  deny-list does not stop the queries their resolver sends: with NodeLocal DNSCache the
  resolver is itself on a link-local address (169.254.20.10).
- **Allow-list mode** (SERVING_EGRESS_POLICY, chart `serving.networkPolicy`, the runners'
  `runner.networkPolicy` shape): only the cluster's DNS pods, the pods of the deployment's
  namespace, the listed namespaces and the listed CIDRs. The denied networks inside a listed
  CIDR are added to its `except`, so `0.0.0.0/0` never opens the metadata service; a listed
  CIDR that lies inside a denied network is the admin's explicit exception and stays.

An IPv4 network is also denied in the IPv6 forms that reach it through a translator (NAT64
`64:ff9b::/96`, 6to4 `2002::/16`), as the runner's guard checks them.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.contract import checked_cidr

Manifest = dict[str, Any]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
DNS_PORTS = ({"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53})
EVERYTHING = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
NAT64 = ipaddress.ip_network("64:ff9b::/96")
SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
SETTING = "SERVING_EGRESS_POLICY (chart: serving.networkPolicy)"
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class EgressSettingError(ValueError):
    """SERVING_EGRESS_POLICY does not say what the chart's `serving.networkPolicy` says."""


@dataclass(frozen=True)
class CidrRule:
    """An allowed network and the parts of it that stay closed."""

    cidr: str
    excepted: tuple[str, ...] = ()


@dataclass(frozen=True)
class EgressAllowList:
    """Allow-list mode: what model-server pods may reach (`serving.networkPolicy`)."""

    dns_namespace: str | None = "kube-system"  # None: no DNS rule
    dns_pod_labels: Mapping[str, str] = field(default_factory=lambda: {"k8s-app": "kube-dns"})
    same_namespace: bool = True
    namespaces: tuple[str, ...] = ()
    cidrs: tuple[CidrRule, ...] = ()


def parse_egress(text: str) -> EgressAllowList | None:
    """The chart's `serving.networkPolicy` as JSON (empty: off); EgressSettingError naming
    the part that is wrong."""
    if not text.strip():
        return None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EgressSettingError(f"{SETTING} is not JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise EgressSettingError(f"{SETTING} must be a JSON object")
    if raw.get("enabled") is False:
        return None
    dns = _typed(raw.get("dns") or {}, dict, "dns")
    labels = _typed(dns.get("podLabels") or {"k8s-app": "kube-dns"}, dict, "dns.podLabels")
    namespaces = _typed(raw.get("namespaces") or [], list, "namespaces")
    for name in namespaces:
        if not isinstance(name, str) or not NAMESPACE.match(name):
            raise EgressSettingError(f"{SETTING} namespaces: {name!r} is not a namespace name")
    return EgressAllowList(
        dns_namespace=str(dns.get("namespace") or "kube-system")
        if dns.get("enabled", True)
        else None,
        dns_pod_labels={str(k): str(v) for k, v in labels.items()},
        same_namespace=bool(raw.get("sameNamespace", True)),
        namespaces=tuple(namespaces),
        cidrs=tuple(_cidr_rule(item) for item in _typed(raw.get("cidrs") or [], list, "cidrs")),
    )


def _typed(value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind):
        wanted = "an object" if kind is dict else "a list"
        raise EgressSettingError(f"{SETTING} {where} must be {wanted}")
    return value


def _cidr_rule(item: object) -> CidrRule:
    try:
        if isinstance(item, str):
            return CidrRule(checked_cidr(item))
        if isinstance(item, dict) and isinstance(item.get("cidr"), str):
            cidr = checked_cidr(item["cidr"])
            excepted = tuple(checked_cidr(str(e)) for e in item.get("except") or ())
            for part in excepted:
                if not _strictly_inside(ipaddress.ip_network(part), ipaddress.ip_network(cidr)):
                    raise ValueError(f"except {part} is not a part of {cidr}")
            return CidrRule(cidr, excepted)
    except ValueError as exc:
        raise EgressSettingError(f"{SETTING} cidrs: {exc}") from None
    raise EgressSettingError(f'{SETTING} cidrs: {item!r} is not "a.b.c.d/n" or {{cidr, except}}')


def egress_rules(denied: Iterable[str], allow: EgressAllowList | None) -> list[Manifest] | None:
    """The NetworkPolicy's `egress` for model-server pods; None when nothing is restricted
    (no denied network and no allow-list)."""
    closed = denied_networks(denied)
    if allow is not None:
        return _allow_list_rules(allow, closed)
    if not closed:
        return None
    rules: list[Manifest] = [{"ports": [dict(p) for p in DNS_PORTS]}]
    blocks = [block for whole in EVERYTHING if (block := _ip_block(whole, closed)) is not None]
    if blocks:  # an empty `to` would allow every address
        rules.append({"to": blocks})
    return rules


def denied_networks(denied: Iterable[str]) -> tuple[Network, ...]:
    """The denied networks, with each IPv4 one also in its NAT64 and 6to4 forms."""
    found: list[Network] = []
    for text in denied:
        network = ipaddress.ip_network(text)
        found.append(network)
        if isinstance(network, ipaddress.IPv4Network):
            found.extend(_translated(network))
    return _collapsed(found)


def _collapsed(networks: Iterable[Network]) -> tuple[Network, ...]:
    """The networks merged where they overlap, IPv4 first."""
    listed = list(networks)
    v4 = [n for n in listed if isinstance(n, ipaddress.IPv4Network)]
    v6 = [n for n in listed if isinstance(n, ipaddress.IPv6Network)]
    return (*ipaddress.collapse_addresses(v4), *ipaddress.collapse_addresses(v6))


def _translated(network: ipaddress.IPv4Network) -> list[ipaddress.IPv6Network]:
    bits = int(network.network_address)
    nat64 = ipaddress.IPv6Network((int(NAT64.network_address) | bits, 96 + network.prefixlen))
    six = ipaddress.IPv6Network(
        (int(SIX_TO_FOUR.network_address) | bits << 80, 16 + network.prefixlen)
    )
    return [nat64, six]


def _ip_block(allowed: Network, closed: tuple[Network, ...]) -> Manifest | None:
    """`{ipBlock: {cidr, except}}` for `allowed` less the closed networks strictly inside it;
    None when a closed network covers it all."""
    same = [c for c in closed if c.version == allowed.version]
    if any(allowed.subnet_of(c) for c in same):  # type: ignore[arg-type]
        return None
    inside = [str(c) for c in same if _strictly_inside(c, allowed)]
    block: Manifest = {"cidr": str(allowed)}
    if inside:
        block["except"] = inside
    return {"ipBlock": block}


def _allow_list_rules(allow: EgressAllowList, closed: tuple[Network, ...]) -> list[Manifest]:
    rules: list[Manifest] = []
    if allow.dns_namespace is not None:
        peer = {
            "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: allow.dns_namespace}},
            "podSelector": {"matchLabels": dict(allow.dns_pod_labels)},
        }
        rules.append({"to": [peer], "ports": [dict(p) for p in DNS_PORTS]})
    if allow.same_namespace:
        rules.append({"to": [{"podSelector": {}}]})
    if allow.namespaces:
        peers = [
            {"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: n}}} for n in allow.namespaces
        ]
        rules.append({"to": peers})
    if blocks := [_listed_block(rule, closed) for rule in allow.cidrs]:
        rules.append({"to": blocks})
    return rules


def _listed_block(rule: CidrRule, closed: tuple[Network, ...]) -> Manifest:
    """A listed CIDR with its own `except` and the denied networks strictly inside it."""
    allowed = ipaddress.ip_network(rule.cidr)
    parts = [ipaddress.ip_network(e) for e in rule.excepted]
    parts += [c for c in closed if _strictly_inside(c, allowed)]
    block: Manifest = {"cidr": rule.cidr}
    if parts:
        block["except"] = [str(p) for p in _collapsed(parts)]
    return {"ipBlock": block}


def _strictly_inside(part: Network, whole: Network) -> bool:
    """True when `part` is a smaller part of `whole` (what an ipBlock's `except` must be)."""
    return (
        part.version == whole.version and part.prefixlen > whole.prefixlen and part.subnet_of(whole)  # type: ignore[arg-type]
    )
