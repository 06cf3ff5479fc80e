"""What `auth.oidc` costs a request: the auth sidecar with tokens against the sidecar with keys.

The real nginx runs the sidecar's nginx.conf as the controller renders it (made local as
`longrun serve` makes it), in front of a runtime that costs nothing (a second nginx answering
200), and the real verifier (`python -m runners.tokencheck`) checks tokens of an issuer made
here (an RSA key, its JWKS on 127.0.0.1). Four cells, interleaved over `--rounds`:

1. `keys only`: a KServe deployment with API keys, no verifier: the baseline;
2. `key, tokens on`: the same key through a sidecar that also accepts tokens (nginx still
   asks the verifier, which answers at once: a valid key was matched);
3. `one token`: the same signed token on every request (the verifier remembers it);
4. `fresh tokens`: a new token on every request (a signature checked each time).

Printed: requests/s (C clients on keep-alive connections), the ratio to `keys only`, and the
verifier's CPU per request.

    python bench/token_check.py                     # ~1 minute
    python bench/token_check.py --requests 20000 --clients 8 --rounds 3
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import jwt  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: E402

from contracts.serving import ModelDeploymentSpec  # noqa: E402
from controller.core.serving import auth, builders, names  # noqa: E402
from controller.core.serving.resolve import resolve_deployment  # noqa: E402
from controller.core.serving.settings import ServingSettings  # noqa: E402
from e2e.tokencheck import VerifierProcess, free_port  # noqa: E402
from local.podspec import local_path  # noqa: E402
from local.sidecars import local_nginx_conf, nginx_binary  # noqa: E402

AUDIENCE = "bench.models"
KEY = auth.generate_keys(1, os.urandom)[0]
PATH = "/v1/models/iris:predict"


class Issuer:
    """One RSA key and its JWKS on 127.0.0.1."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]})
        data = body.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.jwks = f"http://127.0.0.1:{self.server.server_address[1]}/jwks"

    def token(self, n: int = 0) -> str:
        now = int(time.time())
        claims = {"iss": "https://issuer.bench", "aud": AUDIENCE, "sub": f"user-{n}",
                  "iat": now, "exp": now + 3600}  # fmt: skip
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "k1"})


def _deployment(tokens: bool) -> Any:
    spec: dict[str, Any] = {
        "model": {"source": "pvc://models/iris/model.joblib", "format": "sklearn"},
        "runtime": {"kserve": {"protocol": "v1"}},
    }
    if tokens:
        spec["auth"] = {"oidc": {"issuer": "https://issuer.bench", "audiences": [AUDIENCE],
                                 "jwksUri": "https://keys.bench/jwks"}}  # fmt: skip
    obj = {"metadata": {"name": "iris", "namespace": "bench", "uid": "u", "generation": 1},
           "spec": spec}  # fmt: skip
    parsed = ModelDeploymentSpec.model_validate(spec)
    return resolve_deployment(obj, parsed, None, ServingSettings())


@contextmanager
def _nginx(conf_text: str, root: Path, ports: dict[int, int]) -> Iterator[None]:
    keys = local_path(root, f"/etc/longrun/keys/{names.NGINX_KEYS_KEY}")
    keys.parent.mkdir(parents=True, exist_ok=True)
    keys.write_bytes(base64.b64decode(auth.secret_data((KEY,))[names.NGINX_KEYS_KEY]))
    conf = root / "nginx.conf"
    conf.write_text(local_nginx_conf(conf_text, root=root, ports=ports))
    process = subprocess.Popen([nginx_binary(), "-e", "stderr", "-c", str(conf), "-g",
                                "daemon off;"], stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(0.5)
    try:
        yield
    finally:
        process.terminate()
        process.wait(timeout=10)


RUNTIME = """worker_processes 1; pid {root}/rt.pid; error_log /dev/null; events {{}}
http {{ access_log off; client_body_temp_path {root}/cb; proxy_temp_path {root}/p;
fastcgi_temp_path {root}/f; uwsgi_temp_path {root}/u; scgi_temp_path {root}/s;
server {{ listen 127.0.0.1:{port}; location / {{ return 200 '{{"predictions": [0]}}'; }} }} }}
"""


def _drive(
    port: int, headers: Callable[[int], dict[str, str]], requests: int, clients: int
) -> float:
    """Requests/s of `clients` threads on keep-alive connections, `requests` in all."""
    each = requests // clients
    failures: list[int] = []

    def client(c: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in range(each):
            conn.request("POST", PATH, body=b"{}", headers=headers(c * each + i))
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                failures.append(answer.status)
        conn.close()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise SystemExit(f"{len(failures)} requests failed, e.g. HTTP {failures[0]}")
    return each * clients / elapsed


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    issuer = Issuer()
    fresh = [issuer.token(n) for n in range(args.requests)]
    one = issuer.token()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        runtime_port, keys_port, tokens_port = free_port(), free_port(), free_port()
        (work / "rt").mkdir()
        rt_conf = work / "rt" / "nginx.conf"
        rt_conf.write_text(RUNTIME.format(root=work / "rt", port=runtime_port))
        runtime = subprocess.Popen([nginx_binary(), "-c", str(rt_conf), "-g", "daemon off;"])
        keys_only, with_tokens = _deployment(False), _deployment(True)
        oidc = json.loads(builders.build_auth_config_map(with_tokens)["data"]["oidc.json"])
        verifier = VerifierProcess.start({**oidc, "jwksUri": issuer.jwks}, work / "verifier")
        upstream = {8080: runtime_port}
        keys_conf = builders.build_auth_config_map(keys_only)["data"][names.NGINX_CONF_KEY]
        tokens_conf = builders.build_auth_config_map(with_tokens)["data"][names.NGINX_CONF_KEY]
        cells: dict[str, tuple[int, Callable[[int], dict[str, str]]]] = {
            "keys only": (keys_port, lambda i: {"Authorization": f"Bearer {KEY}"}),
            "key, tokens on": (tokens_port, lambda i: {"Authorization": f"Bearer {KEY}"}),
            "one token": (tokens_port, lambda i: {"Authorization": f"Bearer {one}"}),
            "fresh tokens": (tokens_port, lambda i: {"Authorization": f"Bearer {fresh[i]}"}),
        }
        rates: dict[str, list[float]] = {name: [] for name in cells}
        cpu: dict[str, list[float]] = {name: [] for name in cells}
        try:
            with (
                _nginx(keys_conf, work / "keys", {auth.PROXY_HTTP_PORT: keys_port, **upstream}),
                _nginx(
                    tokens_conf,
                    work / "tokens",
                    {
                        auth.PROXY_HTTP_PORT: tokens_port,
                        auth.TOKEN_CHECK_PORT: verifier.port,
                        **upstream,
                    },
                ),  # fmt: skip
            ):
                for _ in range(args.rounds):
                    for name, (port, headers) in cells.items():
                        before = _cpu(verifier.process.pid)
                        rates[name].append(_drive(port, headers, args.requests, args.clients))
                        spent = _cpu(verifier.process.pid) - before
                        cpu[name].append(spent / args.requests * 1e6)
        finally:
            verifier.stop()
            runtime.terminate()
            runtime.wait(timeout=10)
    base = statistics.median(rates["keys only"])
    print(f"{args.requests} requests x {args.rounds} rounds, {args.clients} clients, "
          f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
    print("| cell | requests/s (median, min-max) | ÷ keys only | verifier CPU µs/request |")
    print("| --- | --- | --- | --- |")
    for name in cells:
        median = statistics.median(rates[name])
        print(f"| {name} | {median:,.0f} ({min(rates[name]):,.0f}-{max(rates[name]):,.0f}) | "
              f"{median / base:.2f} | {statistics.median(cpu[name]):.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
