"""`longrun-token-check`: the verifier nginx asks whether a request's bearer JWT is valid.

A ModelDeployment with `auth.oidc` gets, beside its nginx auth sidecar, this small process
in the same pod. nginx's `auth_request` sends it each request's `Authorization` header;
it answers 204 (let through) or 401 with a reason (server.py says the HTTP contract).
It keeps the issuer's signing keys (fetch.py: discovery, JWKS, the in-cluster API server;
keys.py: cache and refresh) and verifies tokens with PyJWT (verify.py).

Threat model, in short: anyone who can reach the model's port can send any token. So the
token never picks the rules: no `alg: none`, no HMAC (a public key used as an HMAC secret
is the classic algorithm-confusion forgery), the algorithm must fit the key's type, and
an unknown `kid` refreshes the keys at most once per 10 s (a flood of made-up kids must
not become a flood of requests to the issuer). Reasons sent back are fixed phrases, never
the token; logs hold reasons only, rate-limited.

    longrun-token-check --config PATH --listen HOST:PORT [--service-account-dir DIR]
                        [--ca-file PEM]

A config that cannot be used is one line on stderr and exit status 2. Keys that cannot be
fetched at start do not stop the process: tokens are refused until they can be.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from pathlib import Path

from runners.tokencheck.config import ConfigError, load
from runners.tokencheck.fetch import SERVICE_ACCOUNT_DIR, Fetcher, jwks_url
from runners.tokencheck.keys import KeySet
from runners.tokencheck.server import CheckServer
from runners.tokencheck.verify import Verifier

USAGE_ERROR = 2


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="longrun-token-check", description="Check bearer JWTs for nginx's auth_request."
    )
    parser.add_argument("--config", type=Path, required=True, help="oidc.json")
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT")
    parser.add_argument(
        "--service-account-dir",
        type=Path,
        default=SERVICE_ACCOUNT_DIR,
        help="ca.crt and token for the in-cluster API server",
    )
    parser.add_argument(
        "--ca-file", type=Path, default=None, help="PEM CAs of the issuer's TLS certificate"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the verifier until interrupted; 2 for an unusable config."""
    args = _parser().parse_args(argv)
    try:
        config = load(args.config)
    except ConfigError as exc:
        print(f"longrun-token-check: bad config: {exc}", file=sys.stderr)
        return USAGE_ERROR
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    fetcher = Fetcher(service_account_dir=args.service_account_dir, ca_file=args.ca_file)
    keys = KeySet(lambda: fetcher.get_json(jwks_url(config, fetcher)))
    try:  # listen first: requests wait in the backlog while the keys are fetched
        server = CheckServer(args.listen, Verifier(config, keys))
    except OSError as exc:
        print(f"longrun-token-check: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 1
    keys.refresh()
    if keys.last_error is not None:
        logging.getLogger("longrun.tokencheck").warning("no keys yet: %s", keys.last_error)
    stop = threading.Event()
    threading.Thread(target=keys.run_refresher, args=(stop,), daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.server_close()
    return 0


def console() -> None:
    """Console-script entry point."""
    sys.exit(main())
