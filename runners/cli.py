"""`longrun-runner` / `python -m runners`: read the contract, run the pipeline, report.

Why the care about exit codes and the termination message: the controller
learns what happened only from them. Exit 2 tells the Job's podFailurePolicy
"bad contract or config, do not retry"; anything else non-zero lets the Job
retry, and the retried pod resumes after the committed chunks. The JSON summary
written to the termination message becomes the run's `status.result`.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from contextlib import ExitStack
from types import FrameType

from contracts.contract import (
    DEFAULT_CONTRACT_PATH,
    EXIT_BAD_CONTRACT,
    EXIT_FAILED,
    EXIT_OK,
    RunnerContract,
    summary_json,
)
from contracts.llm import OPENAI_PROTOCOLS
from contracts.plugins import PROTOCOLS_GROUP, STORAGE_GROUP
from contracts.run import RunResult
from runners import registry
from runners.api import ConfigError, TransientError
from runners.modelcalls import ModelUnavailable
from runners.opening import Opened, check_plugins, load_contract, open_all
from runners.pipeline import BudgetExceeded, Pipeline, Stats
from runners.redact import redact_result, redacting
from runners.retry import Stopped
from runners.shards import Shard

PROG = "longrun-runner"
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
EXIT_SIGTERM = 143
# The code the Job's podFailurePolicy fails the Job on at once (controller/core/builders.py):
# a spent error budget is final, as the same records would fail again in a retried pod.
EXIT_FINAL = EXIT_BAD_CONTRACT

EPILOG = f"""\
environment:
  CONTRACT_PATH             the contract JSON (default {DEFAULT_CONTRACT_PATH})
  TERMINATION_MESSAGE_PATH  where the JSON summary goes (default {DEFAULT_TERMINATION_PATH};
                            a default path that is not writable only logs a warning)
  JOB_NAME                  this execution's Job name (scheduled runs); default: contract jobName
  POD_UID                   this pod's UID, for logs
  {registry.PLUGINS_ENV}    test/dev hook: extra plugins, 'group:name=module:Class;...'
                            (groups {STORAGE_GROUP}, {PROTOCOLS_GROUP})

exit codes:
  0    every record was written (failed ones, within the error budget, to the error output)
  1    the run failed and a retry may do better (the model or a store did not answer within
       the retries, an unexpected error); a retry resumes it
  2    do not retry: bad contract or configuration (one line on stderr names the field), or
       the error budget is spent (every failed record is in the error output)
  143  stopped by SIGTERM; committed chunks stay, a retry resumes after them
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the runner; returns the process exit code."""
    args = _parser().parse_args(argv)
    path = args.contract or os.environ.get("CONTRACT_PATH") or DEFAULT_CONTRACT_PATH
    started = time.monotonic()
    try:
        contract = load_contract(path)
        if args.check:
            check_plugins(contract)
            print(f"{PROG}: contract {path} is valid", file=sys.stderr)
            return EXIT_OK
    except ConfigError as exc:
        # --check reports on stderr only: it is not an execution, so no summary.
        return _fail_config(exc, None if args.check else RunResult(), started=started)
    with redacting():  # no Secret value read from here on shows (runners/redact.py)
        return execute(contract, started=started)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Run one longrun inference execution: stream records from the contract's input "
            "through its model into its output, committing one chunk at a time."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="validate the contract and exit 0/2")
    parser.add_argument("--contract", help="contract path (overrides CONTRACT_PATH)")
    return parser


def execute(contract: RunnerContract, *, started: float) -> int:
    """Run the contract; write the summary; return the exit code."""
    stats = Stats()
    stop = threading.Event()
    _install_sigterm(stop)
    with ExitStack() as stack:
        try:
            opened = open_all(contract, stack, stop=stop)
        except ConfigError as exc:
            return _fail_config(exc, RunResult(), started=started)
        except TransientError as exc:
            return _unavailable(exc, stats, opened=None, started=started)
        except Exception as exc:
            return _fail(exc, stats, opened=None, started=started)
        _log_start(contract, opened)
        return _run(contract, opened, stats=stats, stop=stop, started=started)


def _run(
    contract: RunnerContract, opened: Opened, *, stats: Stats, stop: threading.Event, started: float
) -> int:
    pipeline = Pipeline(
        source=opened.source,
        sink=opened.sink,
        error_sink=opened.error_sink,
        client=opened.client,
        tuning=contract.runner,
        stats=stats,
        stop=stop,
        ids_from_field=opened.ctx.id_field is not None,
        counts_tokens=contract.model.protocol in OPENAI_PROTOCOLS,
        shard=Shard(opened.ctx.shard_index, opened.ctx.shard_count, opened.ctx.shard_rule),
    )
    report = functools.partial(
        _report, stats, opened, started=started, tokens=pipeline.counts_tokens
    )
    settle_garbage_collector()
    try:
        pipeline.run()
    except Stopped:
        return report(code=EXIT_SIGTERM, reason="stopped by SIGTERM")
    except BudgetExceeded as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return report(code=EXIT_FINAL, reason=str(exc))
    except ModelUnavailable as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return report(code=EXIT_FAILED, reason=str(exc))
    except ConfigError as exc:
        report(code=EXIT_BAD_CONTRACT, reason=str(exc))
        return _fail_config(exc, None, started=started)
    except TransientError as exc:
        return _unavailable(exc, stats, opened=opened, started=started)
    except Exception as exc:
        return _fail(exc, stats, opened=opened, started=started)
    return report(code=EXIT_OK, reason=None)


def _install_sigterm(stop: threading.Event) -> None:
    def handler(_signum: int, _frame: FrameType | None) -> None:
        print(
            f"{PROG}: SIGTERM: finishing without committing in-flight work",
            file=sys.stderr,
        )
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def _log_start(contract: RunnerContract, opened: Opened) -> None:
    pod = os.environ.get("POD_UID", "-")
    ctx = opened.ctx
    shard = f" index={ctx.shard_index} of {ctx.shard_count}" if ctx.shard_count > 1 else ""
    print(
        f"{PROG}: run={contract.run.namespace}/{contract.run.name} uid={opened.ctx.run_uid} "
        f"job={opened.ctx.job_name} pod={pod} input={contract.input.kind} "
        f"output={opened.sink.location} model={contract.model.protocol}{shard}",
        file=sys.stderr,
        flush=True,
    )


# Collections of the youngest generation every GC_YOUNG container allocations (CPython's
# default is 700). The runner's objects are nearly all freed by reference counting; a batch's
# records and answers (a dict or list per record) only trigger collections that find nothing,
# and promote the batches in flight to older generations that are walked again.
GC_YOUNG = 10_000


def settle_garbage_collector() -> None:
    """Tune the collector for the pipeline; called once everything is imported and opened.

    Everything alive now lives as long as the process: frozen, full collections stop
    re-walking ~50,000 module objects. A young generation of 10,000 allocations instead of
    700 then takes another ~15 % off the client's CPU for a 256-record Triton batch (two
    outputs: a dict and two lists per record): 310 us with neither and 158 with both
    (bench/runner_client_cpu.py), 188 with the freeze alone (measured the same way, ad hoc).
    On a small node that CPU is the model server's.
    Cyclic garbage is still collected, in bigger and rarer sweeps.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


def _report(
    stats: Stats,
    opened: Opened,
    *,
    started: float,
    code: int,
    reason: str | None,
    tokens: bool = False,
) -> int:
    counted = stats.snapshot()
    result = RunResult(
        prompt_tokens=counted.prompt_tokens if tokens else None,
        completion_tokens=counted.completion_tokens if tokens else None,
        total_tokens=counted.total_tokens if tokens else None,
        records_read=stats.read,
        records_written=stats.written,
        records_failed=stats.failed,
        records_retried=stats.retried,
        chunks=stats.chunks,
        duration_seconds=round(time.monotonic() - started, 3),
        output=opened.sink.location[:2048],
        error_output=opened.error_sink.location[:2048],
        reason=reason[:1024] if reason else None,
        run_completed=stats.run_completed,
    )
    write_summary(result)
    return code


def _fail_config(exc: ConfigError, result: RunResult | None, *, started: float) -> int:
    line = " ".join(str(exc).split())
    print(f"{PROG}: {line}", file=sys.stderr)
    if result is not None:
        duration = round(time.monotonic() - started, 3)
        write_summary(
            result.model_copy(update={"reason": line[:1024], "duration_seconds": duration})
        )
    return EXIT_BAD_CONTRACT


def _unavailable(
    exc: TransientError, stats: Stats, *, opened: Opened | None, started: float
) -> int:
    """A store (or server) still unreachable when the retries are spent: one line, no traceback
    (each attempt already logged its own line), exit 1 so the Job retries the pod."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    reason = f"unavailable: {text[:900]}"
    print(f"{PROG}: {reason} (gave up; exit {EXIT_FAILED}: a retried pod resumes)", file=sys.stderr)
    if opened is not None:
        return _report(stats, opened, started=started, code=EXIT_FAILED, reason=reason)
    write_summary(RunResult(reason=reason, records_retried=stats.retried))
    return EXIT_FAILED


def _fail(exc: BaseException, stats: Stats, *, opened: Opened | None, started: float) -> int:
    traceback.print_exception(exc, file=sys.stderr)
    cause = f"unexpected error: {safe_message(exc)}"
    print(f"{PROG}: {cause}", file=sys.stderr)
    if opened is not None:
        return _report(stats, opened, started=started, code=EXIT_FAILED, reason=cause)
    write_summary(RunResult(reason=cause[:1024]))
    return EXIT_FAILED


def safe_message(exc: BaseException) -> str:
    """`Type: message` fit for a reason (and so a status): no SQL statement, no rows.

    A database driver's error wrapped by SQLAlchemy carries the statement and its
    parameters, the chunk's input rows, in its text: only the driver's own first line is
    kept (`exc.orig`), as for any exception whose text runs over several lines.
    """
    orig = getattr(exc, "orig", None)
    if isinstance(orig, BaseException) and hasattr(exc, "statement"):
        exc = orig
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


def write_summary(result: RunResult) -> None:
    """Write the summary to the termination message and stdout, without Secret values."""
    text = summary_json(redact_result(result))
    print(text, flush=True)
    explicit = os.environ.get("TERMINATION_MESSAGE_PATH")
    path = explicit or DEFAULT_TERMINATION_PATH
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError as exc:
        if explicit:
            print(
                f"{PROG}: cannot write termination message {path}: {exc}",
                file=sys.stderr,
            )
        else:
            print(
                f"{PROG}: warning: termination message not written ({exc})",
                file=sys.stderr,
            )
