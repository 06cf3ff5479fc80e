"""The address guard every host connection goes through (controller/hosts/guard.py).

Real: the guard, the system resolver (for `localhost`, from /etc/hosts) and the address
rules of controller/core/fleets/addresses.py. Faked: nothing; no connection is made.
"""

from __future__ import annotations

import pytest

from controller.core.fleets.addresses import address_problem
from controller.hosts.guard import AddressRefused, HostGuard


@pytest.mark.parametrize(
    ("address", "what"),
    [
        ("127.0.0.2", "a loopback address"),
        ("::1", "a loopback address"),
        ("169.254.169.254", "a link-local address"),
        ("fe80::a9fe:a9fe", "a link-local address"),
        ("0.0.0.0", "the unspecified address"),
        ("::ffff:127.0.0.1", "a loopback address"),  # IPv4-mapped: judged as IPv4
        ("64:ff9b::a9fe:a9fe", "a link-local address"),  # NAT64 of 169.254.169.254
        ("224.0.0.1", "a multicast address"),
    ],
)
def test_refuses_the_addresses_no_host_may_have_whatever_the_settings(
    address: str, what: str
) -> None:
    with pytest.raises(AddressRefused) as refused:
        HostGuard().resolve(address, 80)
    assert str(refused.value) == f"{address} is refused: {what}, which no InferenceHost may have"


def test_refuses_a_name_that_resolves_to_loopback() -> None:
    with pytest.raises(AddressRefused, match=r"^localhost resolves to (127\.0\.0\.1|::1), which"):
        HostGuard().resolve("localhost", 80)


def test_refuses_a_denied_network_naming_the_setting() -> None:
    guard = HostGuard(denied=("198.18.0.0/15",))
    with pytest.raises(AddressRefused) as refused:
        guard.resolve("198.18.3.2", 80)
    assert str(refused.value) == (
        "198.18.3.2 is refused: in 198.18.0.0/15, a network the controller setting "
        "DENIED_CIDRS (chart runner.deniedCIDRs) denies"
    )


def test_refuses_an_address_outside_the_allowed_networks() -> None:
    guard = HostGuard(allowed=("10.0.0.0/8",))
    with pytest.raises(AddressRefused, match=r"outside the networks .* FLEET_ALLOWED_CIDRS"):
        guard.resolve("198.18.3.2", 80)
    assert guard.resolve("10.20.0.7", 80) == ["10.20.0.7"]


def test_lets_an_ordinary_address_through() -> None:
    assert HostGuard(denied=("169.254.0.0/16",)).resolve("198.18.3.2", 80) == ["198.18.3.2"]
    assert address_problem("2001:db8::7") is None
