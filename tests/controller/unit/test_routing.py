"""The event-routing policy (controller.core.routing): plain functions on plain dicts.

Nothing is faked: these are the rules the adapter applies to every informer event.
"""

from __future__ import annotations

from controller.core import names
from controller.core.routing import (
    Wake,
    config_of,
    generation_of,
    is_own_write,
    is_spec_change,
    owner_kind,
    run_of,
    split_config_key,
    wakes,
)


def run(name: str = "a", *, uid: str = "1", generation: int = 1, phase: str | None = None) -> dict:
    obj: dict = {
        "metadata": {"namespace": "ns", "name": name, "uid": uid, "generation": generation},
        "spec": {"configRef": {"name": "cfg"}},
    }
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def child(rv: str = "5") -> dict:
    return {
        "metadata": {
            "namespace": "ns",
            "name": "a-job",
            "resourceVersion": rv,
            "annotations": {names.RUN_ANNOTATION: "a"},
            "ownerReferences": [{"kind": "InferenceRun", "controller": True}],
        }
    }


def no_users(_: str) -> list[str]:
    return []


def test_new_run_is_urgent_and_reported_run_is_not() -> None:
    fresh = wakes("InferenceRun", run(), present=True, spec_changed=True, own_write=False,
                  users=no_users)  # fmt: skip
    seen = wakes("InferenceRun", run(phase="Running"), present=True, spec_changed=True,
                 own_write=False, users=no_users)  # fmt: skip
    assert fresh == [Wake("ns/a", urgent=True)]
    assert seen == [Wake("ns/a", urgent=False)]


def test_status_only_update_of_a_run_wakes_nobody() -> None:
    assert wakes("InferenceRun", run(), present=True, spec_changed=False, own_write=False,
                 users=no_users) == []  # fmt: skip


def test_deleted_run_is_never_urgent() -> None:
    assert wakes("InferenceRun", run(), present=False, spec_changed=True, own_write=False,
                 users=no_users) == [Wake("ns/a")]  # fmt: skip


def test_config_change_wakes_every_run_that_uses_it() -> None:
    config = {"metadata": {"namespace": "ns", "name": "cfg"}}
    found = wakes("InferenceConfig", config, present=True, spec_changed=False, own_write=False,
                  users=lambda key: ["ns/a", "ns/b"] if key == "ns/cfg" else [])  # fmt: skip
    assert found == [Wake("ns/a"), Wake("ns/b")]


def test_child_wakes_its_run_unless_it_echoes_our_own_write() -> None:
    assert wakes("Job", child(), present=True, spec_changed=False, own_write=False,
                 users=no_users) == [Wake("ns/a", batched=True)]  # fmt: skip
    assert wakes("Job", child(), present=True, spec_changed=False, own_write=True,
                 users=no_users) == []  # fmt: skip
    # A deletion always wakes the run, even of an object we wrote.
    assert wakes("Job", child(), present=False, spec_changed=False, own_write=True,
                 users=no_users) == [Wake("ns/a", batched=True)]  # fmt: skip


def test_child_event_that_changes_nothing_read_wakes_nobody_but_a_deletion_does() -> None:
    assert wakes("Pod", child(), present=True, spec_changed=False, own_write=False,
                 news=False, users=no_users) == []  # fmt: skip
    assert wakes("Pod", child(), present=False, spec_changed=False, own_write=False,
                 news=False, users=no_users) == [Wake("ns/a", batched=True)]  # fmt: skip


def test_object_made_for_no_run_wakes_nobody() -> None:
    stray = {"metadata": {"namespace": "ns", "name": "x"}}
    assert wakes("Pod", stray, present=True, spec_changed=False, own_write=False,
                 users=no_users) == []  # fmt: skip


def test_spec_change_is_a_new_generation_or_a_new_uid_or_a_deletion() -> None:
    seen = generation_of(run())
    assert not is_spec_change(seen, run())
    assert is_spec_change(seen, run(generation=2))
    assert is_spec_change(seen, run(uid="2"))  # deleted and created again, same generation
    assert is_spec_change(None, run())
    deleting = run()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert is_spec_change(seen, deleting)


def test_own_write_is_exactly_the_version_we_wrote() -> None:
    assert is_own_write(child("5"), child("5"))
    assert not is_own_write(child("5"), child("6"))
    assert not is_own_write(None, child("5"))


def test_keys_come_from_our_annotation_and_the_config_ref() -> None:
    assert run_of(child()) == "ns/a"
    assert config_of(run()) == "ns/cfg"
    other = run()
    other["spec"]["configRef"]["namespace"] = "shared"
    assert config_of(other) == "shared/cfg"
    assert owner_kind(child()) == "InferenceRun"


def test_config_spec_change_wakes_the_config_itself_but_not_its_status_update() -> None:
    config = {"metadata": {"namespace": "ns", "name": "cfg"}}
    changed = wakes("InferenceConfig", config, present=True, spec_changed=True, own_write=False,
                    users=no_users)  # fmt: skip
    echo = wakes("InferenceConfig", config, present=True, spec_changed=False, own_write=False,
                 users=no_users)  # fmt: skip
    assert changed == [Wake("InferenceConfig/ns/cfg")] and echo == []
    assert split_config_key("InferenceConfig/ns/cfg") == "ns/cfg"
    assert split_config_key("ns/run") is None
