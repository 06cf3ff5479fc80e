"""The serving settings as the controller reads them from its environment: the safe
defaults, the patterns and lists it accepts, and a bad value stopping start-up with one
line naming the variable.

Real: serving_settings_from_env and local_serving_settings on plain dicts. Faked: nothing.
"""

from __future__ import annotations

import pytest

from controller.core.serving.egress import CidrRule, EgressAllowList
from controller.core.serving.settings import local_serving_settings, serving_settings_from_env
from controller.core.settings import SettingsError


def test_host_patterns_are_lowercased_and_may_name_the_namespace_anywhere_in_a_label() -> None:
    env = {"ALLOWED_SERVING_HOSTS": "*.{namespace}.Apps.Example.com, api-{namespace}.example.com"}
    assert serving_settings_from_env(env).allowed_hosts == (
        "*.{namespace}.apps.example.com",
        "api-{namespace}.example.com",
    )
    assert serving_settings_from_env({"ALLOWED_SERVING_HOSTS": "*"}).allowed_hosts == ("*",)


@pytest.mark.parametrize(
    "pattern", ["https://apps.example.com", "*.{namespace}", "a..example.com", "x*.example.com",
                "apps_example.com", "{ns}.example.com"],
)  # fmt: skip
def test_a_bad_host_pattern_stops_start_up_naming_the_setting(pattern: str) -> None:
    with pytest.raises(SettingsError, match=r"^ALLOWED_SERVING_HOSTS: .* is not a host pattern"):
        serving_settings_from_env({"ALLOWED_SERVING_HOSTS": pattern})


def test_cluster_ip_is_always_an_allowed_service_type() -> None:
    assert serving_settings_from_env({}).allowed_service_types == ("ClusterIP",)
    listed = serving_settings_from_env({"ALLOWED_SERVING_SERVICE_TYPES": "LoadBalancer"})
    assert listed.allowed_service_types == ("ClusterIP", "LoadBalancer")
    with pytest.raises(SettingsError, match="ALLOWED_SERVING_SERVICE_TYPES: 'ExternalName'"):
        serving_settings_from_env({"ALLOWED_SERVING_SERVICE_TYPES": "ExternalName"})


def test_custom_commands_take_true_or_false_only() -> None:
    assert serving_settings_from_env(
        {"SERVING_ALLOW_CUSTOM_COMMANDS": "true"}
    ).allow_custom_commands
    with pytest.raises(SettingsError, match="SERVING_ALLOW_CUSTOM_COMMANDS='sure'"):
        serving_settings_from_env({"SERVING_ALLOW_CUSTOM_COMMANDS": "sure"})


def test_the_deny_list_is_the_runners_own_setting() -> None:
    env = {"DENIED_CIDRS": "169.254.169.254, fe80::/10"}
    assert serving_settings_from_env(env).denied_cidrs == ("169.254.169.254/32", "fe80::/10")
    with pytest.raises(SettingsError, match="DENIED_CIDRS"):
        serving_settings_from_env({"DENIED_CIDRS": "metadata"})


def test_the_egress_allow_list_is_the_charts_values_as_json() -> None:
    text = '{"enabled": true, "dns": {"enabled": false}, "cidrs": ["10.0.0.0/8"]}'
    assert serving_settings_from_env({"SERVING_EGRESS_POLICY": text}).egress == EgressAllowList(
        dns_namespace=None, cidrs=(CidrRule("10.0.0.0/8"),)
    )
    assert serving_settings_from_env({"SERVING_EGRESS_POLICY": ""}).egress is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{cidrs: []}", "is not JSON"),
        ("[]", "must be a JSON object"),
        ('{"cidrs": ["everything"]}', "is not a CIDR"),
        ('{"cidrs": [{"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}]}', "is not a part of"),
        ('{"cidrs": [{"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8"]}]}', "is not a part of"),
        ('{"cidrs": [42]}', "is not"),
        ('{"dns": "kube-system"}', "dns must be an object"),
        ('{"namespaces": "storage"}', "namespaces must be a list"),
        ('{"namespaces": ["Storage"]}', "is not a namespace name"),
    ],
)
def test_a_bad_egress_allow_list_stops_start_up_naming_the_setting(text: str, message: str) -> None:
    with pytest.raises(SettingsError, match=rf"^SERVING_EGRESS_POLICY .*{message}"):
        serving_settings_from_env({"SERVING_EGRESS_POLICY": text})


def test_local_mode_opens_what_only_a_cluster_has() -> None:
    # No other tenant, no image pulled, no Ingress, Service or certificate made: the local
    # command gates what a generic deployment runs on the host.
    local = local_serving_settings({"ALLOWED_SERVING_IMAGES": "", "DENIED_CIDRS": ""})
    assert local.allowed_images == ("*",) and local.allow_custom_commands
    assert local.allowed_env_secrets == ("*",) and local.allowed_hosts == ("*",)
    assert set(local.allowed_service_types) == {"ClusterIP", "NodePort", "LoadBalancer"}
