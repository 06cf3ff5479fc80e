"""`python -m batchapi.local.job RUN_DIR`: one local batch, run by `longrun run`.

Started detached by `LocalCluster` (batchapi/local/cluster.py) with the arguments it wrote to
`RUN_DIR/args.json`. It runs `longrun run ... -o json` in this process, so Ctrl-C (SIGINT, a
cancel) stops the pod and keeps the committed chunks as `longrun run` does, and writes
`RUN_DIR/result.json` at the end: the exit code and the status `longrun run` printed. The
result file is the job's last act: without it, the job is running or died.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

JOB_FILE, RESULT_FILE = "job.json", "result.json"


def job_alive(job: dict[str, Any]) -> bool:
    """True while the job process of `job.json` runs (not a zombie, not another program)."""
    pid = int(job.get("pid") or 0)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state != "Z" and b"batchapi.local.job" in cmdline


def main(argv: list[str]) -> int:
    """Run the batch of RUN_DIR; the exit code of `longrun run`."""
    from local.run import main as longrun_run  # the job's only work: `longrun run`

    folder = Path(argv[0])
    args = json.loads((folder / "args.json").read_text())
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = longrun_run(args)
    text = printed.getvalue().strip()
    try:
        status = json.loads(text) if text else {}
    except ValueError:
        status = {}
    finished = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    result = {"exitCode": code, "status": status, "finished": finished}
    tmp = folder / f".{RESULT_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, folder / RESULT_FILE)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
