"""One tenant can never read, list, cancel or guess another's files or batches.

Real: the server and the `openai` client (and plain HTTP where a client would refuse to send
the request: no key at all, a made-up path). Faked: the cluster's reviews (a token table and
grants, tests/batchapi/fakes.py); tests/e2e/test_batch_api_auth.py makes the same attacks with
real tokens, TokenReview and SubjectAccessReview on both Kubernetes backends.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable

import openai
import pytest

from tests.batchapi.conftest import Served
from tests.batchapi.test_openai_client import ENDPOINT, request_line, upload


def alice_batch(served: Served) -> tuple[str, str]:
    """A batch and its input file in team-a."""
    client = served.client("alice-token")
    file_id = upload(client, [request_line(0)])
    batch = client.batches.create(input_file_id=file_id, endpoint=ENDPOINT, completion_window="24h")
    return batch.id, file_id


def answer(
    served: Served, method: str, path: str, token: str | None
) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        served.server.url + path, method=method, data=b"" if method == "POST" else None
    )
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_another_tenants_ids_answer_exactly_as_missing_ones(served: Served) -> None:
    batch_id, file_id = alice_batch(served)
    served.cluster.add_user("carol-token", "carol", "team-c")  # allowed nowhere near team-a
    missing_batch, missing_file = "batch_" + "0" * 32, "file-" + "0" * 40
    for namespace in ("team-a", "team-b"):
        for token in ("bob-token", "carol-token", "not-a-token", None):
            for method, path, missing in [
                ("GET", f"batches/{batch_id}", missing_batch),
                ("POST", f"batches/{batch_id}/cancel", missing_batch),
                ("GET", f"files/{file_id}", missing_file),
                ("GET", f"files/{file_id}/content", missing_file),
                ("DELETE", f"files/{file_id}", missing_file),
            ]:
                status, body = answer(served, method, f"/namespaces/{namespace}/v1/{path}", token)
                real_id = batch_id if "batch" in path else file_id
                _, absent = answer(
                    served,
                    method,
                    f"/namespaces/team-a/v1/{path.replace(real_id, missing)}",
                    "alice-token",
                )
                assert status == 404, (namespace, token, path)
                assert json.dumps(body).replace(real_id, missing) == json.dumps(absent)
    run = next(iter(served.cluster.runs.values()))
    assert "cancel" not in run["spec"]  # nobody cancelled it
    assert served.store.get_meta("team-a", file_id) is not None  # nobody deleted it


def test_an_id_of_the_wrong_shape_is_missing_and_touches_no_path(served: Served) -> None:
    for path in ("files/..%2F..%2Fetc", "files/file-../content", "batches/batch_x"):
        status, _ = answer(served, "GET", f"/namespaces/team-a/v1/{path}", "alice-token")
        assert status == 404


def test_lists_show_only_the_callers_namespace(served: Served) -> None:
    batch_id, file_id = alice_batch(served)
    bob = served.client("bob-token", "team-b")
    assert bob.batches.list().data == [] and bob.files.list().data == []
    with pytest.raises(openai.PermissionDeniedError, match="bob may not list"):
        served.client("bob-token", "team-a").batches.list()
    alice = served.client("alice-token")
    assert [b.id for b in alice.batches.list()] == [batch_id]
    assert [f.id for f in alice.files.list()] == [file_id]


def test_collections_need_an_accepted_token_and_the_permission(served: Served) -> None:
    for token in (None, "expired-or-unknown"):
        status, body = answer(served, "GET", "/namespaces/team-a/v1/batches", token)
        assert status == 401 and body["error"]["code"] == "invalid_api_key"  # type: ignore[index]
    with pytest.raises(openai.AuthenticationError):
        served.client("nobody").files.create(file=("x.jsonl", b"{}\n"), purpose="batch")
    served.cluster.add_user("reader-token", "reader", "team-a", "get", "list")
    with pytest.raises(openai.PermissionDeniedError, match="reader may not create"):
        served.client("reader-token").files.create(file=("x.jsonl", b"{}\n"), purpose="batch")
    assert served.store.list_ids("team-a") == []


def test_ids_are_unguessable(served: Served) -> None:
    client = served.client("alice-token")
    file_id = upload(client, [request_line(0)])
    batches = {
        client.batches.create(input_file_id=file_id, endpoint=ENDPOINT, completion_window="24h").id
        for _ in range(3)
    }
    assert len(batches) == 3
    for batch_id in batches:
        random_part = batch_id.removeprefix("batch_")
        assert len(random_part) == 32 and int(random_part, 16) >= 0  # 128 random bits
    assert len(file_id.removeprefix("file-")) == 40  # 8 hex digits of time + 128 random bits


def test_a_namespace_the_server_does_not_serve_is_refused(serve: Callable[..., Served]) -> None:
    served = serve(namespaces=("team-b",))
    with pytest.raises(openai.PermissionDeniedError, match="does not serve namespace team-a"):
        served.client("alice-token").batches.list()
    status, _ = answer(served, "GET", "/namespaces/team-a/v1/files/file-" + "0" * 40, "alice-token")
    assert status == 404
