"""An upload streams: the server's memory does not grow with the file.

Real: `longrun batch-api --local` as a process (its files in a directory), the official
`openai` client uploading a 100 MB batch file, the server's peak resident memory read from
/proc (VmHWM) before and after. Faked: nothing. Prints the upload's rate (not asserted).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import openai

from e2e.system import ROOT

TEMPLATE = """\
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata: {name: llm, annotations: {longrun.dev/openai-model: m}}
spec:
  model: {protocol: openai-chat, url: "http://127.0.0.1:9/v1", name: m}
  storage: {input: {file: {path: /unused.jsonl}}, output: {file: {path: /unused}}}
"""


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_100_mb_upload_leaves_the_servers_memory_where_it_was(tmp_path: Path) -> None:
    (tmp_path / "models.yaml").write_text(TEMPLATE)
    argv = [
        sys.executable,
        "-m",
        "controller",
        "batch-api",
        "--local",
        "-f",
        str(tmp_path / "models.yaml"),
        "--work-dir",
        str(tmp_path / "work"),
        "--port",
        "0",
        "--max-file-bytes",
        str(300 * 1000 * 1000),
    ]
    with (tmp_path / "server.log").open("wb") as log:
        server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, cwd=ROOT)
    try:
        assert server.stdout is not None
        first = json.loads(server.stdout.readline())
        key = Path(first["apiKeyFile"]).read_text().strip()
        body = {"model": "m", "messages": [{"role": "user", "content": "x" * 50_000}]}
        line = {"method": "POST", "url": "/v1/chat/completions", "body": body}
        small = (json.dumps({**line, "custom_id": "warm-up"}) + "\n").encode()
        data = b"".join(
            (json.dumps({**line, "custom_id": f"r{i}"}) + "\n").encode() for i in range(2000)
        )
        assert len(data) > 100_000_000
        with openai.OpenAI(base_url=first["url"], api_key=key, max_retries=0, timeout=600) as c:
            c.files.create(file=("warm.jsonl", small), purpose="batch")
            before = peak_rss_kib(server.pid)
            started = time.monotonic()
            uploaded = c.files.create(file=("big.jsonl", data), purpose="batch")
            took = time.monotonic() - started
            after = peak_rss_kib(server.pid)
            assert uploaded.bytes == len(data)
            assert c.files.content(uploaded.id).read() == data
        print(
            f"\nupload: {len(data) / 1e6:.0f} MB in {took:.1f} s ({len(data) / 1e6 / took:.0f}"
            f" MB/s); server peak RSS {before // 1024} MiB -> {after // 1024} MiB"
        )
        assert after - before < 32 * 1024, (before, after)  # KiB; the file is 100 MB
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout is not None:
            server.stdout.close()
