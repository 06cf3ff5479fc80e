"""`longrun-fetch` of whole Hugging Face repositories (format hf): the snapshot at a revision's
commit, include/exclude patterns, the hub's per-file hashes, and downloads resumed with Range.

Real: the program (in-process through `main`), requests against a Hugging Face hub stand-in on
127.0.0.1 (e2e/peers/hfhub.py: the hub's revision API with `blobs=true`, `resolve` URLs,
Range requests answered 206), files on disk. Faked: the hub itself (no test reaches
huggingface.co); its faults (a download dropped halfway, bytes other than listed) are scripted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.peers.hfhub import Hub, Repo, serve_hub
from runners import fetch

WEIGHTS = bytes(range(256)) * 4096  # 1 MiB, LFS
FILES = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"]}',
    "tokenizer.json": b'{"version": "1.0"}',
    "model.safetensors": WEIGHTS,
    "pytorch_model.bin": b"pickled weights",
    "original/consolidated.pth": b"the same weights again",
}
COMMIT = "a" * 40


@pytest.fixture(autouse=True)
def termination_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "termination-log"
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(path))
    return path


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    repo = Repo(FILES, commit=COMMIT, lfs=frozenset({"model.safetensors", "pytorch_model.bin"}))
    with serve_hub({"org/tiny": repo}) as served:
        monkeypatch.setenv("HF_ENDPOINT", served.url)
        yield served


def resolved(hub: Hub) -> list[str]:
    return [path for path, _ in hub.seen if "/resolve/" in path]


def test_fetches_the_snapshot_at_the_revisions_commit_with_only_the_wanted_files(
    hub: Hub, tmp_path: Path
) -> None:
    dest = tmp_path / "repo"
    argv = ["hf://org/tiny@main", str(dest), "--exclude", "*.bin", "--exclude", "original/"]
    assert fetch.main(argv) == 0
    assert sorted(p.name for p in dest.rglob("*") if p.is_file()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    assert (dest / "model.safetensors").read_bytes() == WEIGHTS
    assert ("/api/models/org/tiny/revision/main", None) in hub.seen
    # Every file from the commit the branch pointed at, never from the branch's name.
    assert all(f"/org/tiny/resolve/{COMMIT}/" in path for path in resolved(hub))
    assert fetch.marker_of(dest).exists()


def test_include_patterns_take_only_what_they_match(hub: Hub, tmp_path: Path) -> None:
    dest = tmp_path / "repo"
    assert fetch.main(["hf://org/tiny", str(dest), "--include", "*.json"]) == 0
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "tokenizer.json"]


def test_a_download_dropped_halfway_is_resumed_with_a_range_request(
    hub: Hub, tmp_path: Path
) -> None:
    hub.cut.add("org/tiny/model.safetensors")
    dest = tmp_path / "repo"
    assert fetch.main(["hf://org/tiny", str(dest), "--include", "*.safetensors"]) == 0
    assert (dest / "model.safetensors").read_bytes() == WEIGHTS
    ranges = [r for path, r in hub.seen if path.endswith("model.safetensors") and r]
    assert ranges == [f"bytes={len(WEIGHTS) // 2}-"]  # continued from where it stopped


def test_a_partial_download_left_by_a_failed_fetch_is_continued_by_the_next_one(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "repo"
    argv = ["hf://org/tiny", str(dest), "--include", "*.safetensors", "--include", "*.json"]
    # The first fetch's attempts all fail after half the weights (the pod is killed, say).
    monkeypatch.setattr("runners.fetch_base.ATTEMPTS", 1)
    hub.cut.add("org/tiny/model.safetensors")
    assert fetch.main(argv) == 5
    partial = tmp_path / "repo.partial"
    assert (partial / "model.safetensors").stat().st_size == len(WEIGHTS) // 2
    assert not dest.exists() and not fetch.marker_of(dest).exists()
    hub.seen.clear()

    assert fetch.main(argv) == 0

    assert (dest / "model.safetensors").read_bytes() == WEIGHTS
    weights = [r for path, r in hub.seen if path.endswith("model.safetensors")]
    assert weights == [f"bytes={len(WEIGHTS) // 2}-"]
    assert not partial.exists()


def test_a_partial_download_of_another_commit_starts_over(hub: Hub, tmp_path: Path) -> None:
    dest = tmp_path / "repo"
    partial = tmp_path / "repo.partial"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"half of an older version")
    record = {"source": "hf://org/tiny", "version": "b" * 40, "sha256": None}
    record.update(include=["*.safetensors"], exclude=[])
    (tmp_path / "repo.partial.source").write_text(json.dumps(record, sort_keys=True))

    assert fetch.main(["hf://org/tiny", str(dest), "--include", "*.safetensors"]) == 0

    assert (dest / "model.safetensors").read_bytes() == WEIGHTS
    assert [r for path, r in hub.seen if path.endswith(".safetensors")] == [None]


@pytest.mark.parametrize(
    ("path", "said"),
    [("model.safetensors", "sha256 is "), ("config.json", "git blob id is ")],
)
def test_a_file_that_is_not_what_the_hub_lists_exits_3_naming_it(
    hub: Hub, tmp_path: Path, termination_log: Path, path: str, said: str
) -> None:
    original = FILES[path]
    hub.tampered[f"org/tiny/{path}"] = bytes(reversed(original))  # same size, other bytes
    dest = tmp_path / "repo"
    assert fetch.main(["hf://org/tiny", str(dest)]) == 3
    message = termination_log.read_text()
    assert message.startswith(f"exit 3: hf://org/tiny/{path}: {said}")
    assert not dest.exists() and not fetch.marker_of(dest).exists()


def test_a_repository_larger_than_the_cache_is_refused_before_any_download(
    hub: Hub, tmp_path: Path, termination_log: Path
) -> None:
    assert fetch.main(["hf://org/tiny", str(tmp_path / "repo"), "--max-size", "100Ki"]) == 2
    assert "larger than the cache allows (100Ki" in termination_log.read_text()
    assert resolved(hub) == []


def test_patterns_that_match_nothing_exit_2(
    hub: Hub, tmp_path: Path, termination_log: Path
) -> None:
    assert fetch.main(["hf://org/tiny", str(tmp_path / "r"), "--include", "*.gguf"]) == 2
    assert "no file of the repository matches include/exclude" in termination_log.read_text()


def test_a_missing_revision_exits_4(hub: Hub, tmp_path: Path) -> None:
    assert fetch.main(["hf://org/tiny@no-such-branch", str(tmp_path / "r")]) == 4


def test_the_hubs_hashes_are_what_huggingface_hub_would_check(hub: Hub) -> None:
    # The stand-in's listing: LFS files carry the SHA-256 of their bytes, the others their git
    # blob id, as the hub's API answers with blobs=true.
    listing = {s["rfilename"]: s for s in hub.repos["org/tiny"].siblings(blobs=True)}
    weights = listing["model.safetensors"]["lfs"]
    assert weights["sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    blob = b"blob %d\0" % len(FILES["config.json"]) + FILES["config.json"]
    assert listing["config.json"]["blobId"] == hashlib.sha1(blob).hexdigest()


def test_a_hub_on_a_denied_network_is_refused_before_anything_is_sent(
    hub: Hub, tmp_path: Path, termination_log: Path
) -> None:
    argv = ["hf://org/tiny", str(tmp_path / "repo"), "--denied-cidrs", "127.0.0.0/8"]
    assert fetch.main(argv) == 2
    assert "DENIED_CIDRS" in termination_log.read_text()
    assert hub.seen == []  # not even the file list
