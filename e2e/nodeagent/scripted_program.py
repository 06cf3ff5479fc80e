"""The program a scripted container runs (e2e/nodeagent/scripted.py): standard library only.

`python -S scripted_program.py CONTROL_DIR init|main`. An init container exits 0 at once.
A main container reads `CONTROL_DIR/script.json` (`exit_code`, `message`, `duration`,
`hold`, `log`), prints `log`, then ends after `duration` seconds, or, when `hold` is set,
once `CONTROL_DIR/finish.json` appears (it also ends a running one early); it writes the
outcome's `message` to `$TERMINATION_MESSAGE_PATH` and exits with its `exit_code`. SIGTERM
ends it as it ends any process that does not handle it (the agent reports exit code 143).
"""

import json
import os
import sys
import time
from pathlib import Path

POLL = 0.02


def main(control: Path, role: str) -> int:
    if role == "init":
        return 0
    script = json.loads((control / "script.json").read_text())
    if script.get("log"):
        sys.stdout.write(script["log"])
        sys.stdout.flush()
    end = time.monotonic() + float(script.get("duration") or 0)
    finish = control / "finish.json"
    while not finish.exists() and (script.get("hold") or time.monotonic() < end):
        time.sleep(POLL)
    outcome = json.loads(finish.read_text()) if finish.exists() else script
    message = outcome.get("message") or ""
    where = os.environ.get("TERMINATION_MESSAGE_PATH")
    if message and where:
        Path(where).write_text(message)
    return int(outcome.get("exit_code") or 0)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2]))
