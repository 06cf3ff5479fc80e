"""A stand-in runner image for `longrun run` tests (mapped with --image-map).

It does what the tests need to observe from inside a pod and nothing else:
records its environment, the contract and the Secret files it can see, then
behaves as FAKE_MODE says. It imports nothing of longrun, as a custom image would.

FAKE_MODE (from the config's spec.pod.env): `ok` (exit 0), `fail` (exit 1),
`bad` (exit 2), `sleep` (run until killed), `fail-then-ok` (exit 1 on the first
FAKE_FAILS attempts, counted in FAKE_STATE, then 0).
"""

import json
import os
import sys
import time
from pathlib import Path

mode = os.environ.get("FAKE_MODE", "ok")
out = Path(os.environ["FAKE_OUT"])
out.mkdir(parents=True, exist_ok=True)
contract_path = Path(os.environ["CONTRACT_PATH"])
contract = json.loads(contract_path.read_text())
secrets = {}
secrets_dir = Path(contract["secretsDir"])
if secrets_dir.is_dir():
    for path in sorted(p for p in secrets_dir.rglob("*") if p.is_file()):
        rel = str(path.relative_to(secrets_dir))
        secrets[rel] = {"value": path.read_text(), "mode": oct(path.stat().st_mode & 0o777)}
seen = {"env": dict(os.environ), "contract": contract, "secrets": secrets, "argv": sys.argv}
attempts = sorted(out.glob("attempt-*.json"))
(out / f"attempt-{len(attempts)}.json").write_text(json.dumps(seen))
print("progress: records=5 rate=5.0/s total=10 eta=1s", file=sys.stderr, flush=True)
print("fake runner: hello from the pod", file=sys.stderr, flush=True)
summary = {"recordsRead": 10, "recordsWritten": 10, "output": "fake://out"}
code = {"ok": 0, "fail": 1, "bad": 2}.get(mode, 0)
if mode == "sleep":
    time.sleep(600)
if mode == "fail-then-ok":
    code = 1 if len(attempts) < int(os.environ.get("FAKE_FAILS", "1")) else 0
if code:
    summary = {"reason": f"fake failure {code}"}
Path(os.environ["TERMINATION_MESSAGE_PATH"]).write_text(json.dumps(summary))
sys.exit(code)
