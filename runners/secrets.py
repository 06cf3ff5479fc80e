"""Reading the Secrets the controller mounted for this run.

The contract holds only references; the controller mounts each referenced
Secret at `<secretsDir>/<secret name>/<key>` (read-only). A missing file is a
configuration error that names the reference, never a silent empty value.
Every value read is remembered for redaction (runners/redact.py): it never shows in a
log line, a reason or the summary.
"""

from __future__ import annotations

from pathlib import Path

from runners.api import ConfigError, RunContext
from runners.redact import remember


def read_secret(ctx: RunContext, *, name: str, key: str, field: str) -> str:
    """The value of Secret `name`, key `key`; `field` names the contract field for errors."""
    path = Path(ctx.secrets_dir) / name / key
    try:
        return remember(path.read_text().strip())
    except FileNotFoundError:
        raise ConfigError(
            f"{field}: Secret {name!r} key {key!r} is not mounted at {path}; create the Secret "
            "in the run's namespace with that key"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{field}: cannot read Secret {name!r} key {key!r}: {exc}") from None


def secret_path(ctx: RunContext, *, name: str, key: str) -> Path:
    """Where a Secret key is mounted (for libraries that want a file, e.g. a CA bundle)."""
    return Path(ctx.secrets_dir) / name / key
