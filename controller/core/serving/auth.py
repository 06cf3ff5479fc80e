"""API keys: generated into a Secret, checked by the runtime or by an nginx sidecar.

The keys exist in one place only, the Secret, which the controller writes but never reads
(keys.py). The runtime (llama.cpp `--api-key-file`)
or the sidecar (an nginx `map` file) reads them from the Secret mounted as a volume;
the sidecar's nginx.conf, which holds no key, is the only thing in a ConfigMap. Keys
are made by `generate_keys` from a random source passed in, so deciding stays pure and
tests can pin the randomness.

The sidecar listens on the pod's public port, answers 401 to a request whose
`Authorization: Bearer <key>` is not in the list, strips the header and proxies to the
runtime on 127.0.0.1. The runtime's health path is let through unchecked so the kubelet's
probes need no key (llama.cpp does the same for its /health).

Two rules from issue 26:
- keys compare exactly. An nginx `map` compares plain strings without regard to letter case
  (its hash lowercases them), so each key is a case-sensitive regular expression of its own
  (`~^(?i:bearer) <key>$`: the scheme's case does not matter, RFC 7235, the key's does);
- nothing is pasted into nginx.conf unquoted: the health path, the one value that comes from
  a spec, must be a URL path of the safe characters (contracts/serving/text.py checks the spec,
  `nginx_string` checks again here) and is written as one quoted token.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass

from contracts.serving import API_KEY_SECRET_KEY, API_KEYS_SECRET_KEY
from contracts.serving.text import check_url_path
from controller.core.builders import restricted_container_security
from controller.core.serving import names
from controller.core.serving.runtimes import KEYS_MOUNT, LOOPBACK, METRICS_PATH, RuntimePlan

Manifest = dict[str, object]
Entropy = Callable[[int], bytes]
KEY_BYTES = 32
KEY_PREFIX = "lrk_"
PROXY_HTTP_PORT = 9080
PROXY_GRPC_PORT = 9081
PROXY_METRICS_PORT = 9090  # the runtime's metrics path only, without a key (SERVING_METRICS)
PROXY_CONF_MOUNT = "/etc/longrun/auth-proxy"
TOKEN_CHECK_PORT = 9099  # the token verifier, on loopback only (tokens.py)
TOKEN_LOCATION = "/_longrun/token-check"
REFUSED_LOCATION = "@longrun_refused"
TOKEN_NAMED = "@longrun_token"
TMP_VOLUME = "tmp"
CONF_VOLUME = "auth-proxy-config"
KEYS_VOLUME = "api-keys"
_KEY_ALPHABET = re.compile(r"[A-Za-z0-9_-]+")  # what generate_keys makes: no regex syntax


def generate_keys(count: int, entropy: Entropy) -> tuple[str, ...]:
    """`count` new API keys, each 256 bits from `entropy` (e.g. `secrets.token_bytes`)."""
    keys = []
    for _ in range(count):
        raw = entropy(KEY_BYTES)
        if len(raw) != KEY_BYTES:
            raise ValueError(f"the random source gave {len(raw)} bytes, not {KEY_BYTES}")
        keys.append(KEY_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("="))
    return tuple(keys)


def secret_data(keys: tuple[str, ...]) -> dict[str, str]:
    """The Secret's `data` (base64): first key, every key one a line, and the nginx map."""
    lines = "".join(f"{key}\n" for key in keys)
    plain = {
        API_KEY_SECRET_KEY: keys[0],
        API_KEYS_SECRET_KEY: lines,
        names.NGINX_KEYS_KEY: nginx_key_map(keys),
    }
    return {k: base64.b64encode(v.encode()).decode() for k, v in plain.items()}


def nginx_key_map(keys: tuple[str, ...]) -> str:
    """The `map` entries the sidecar includes: one case-sensitive regex per key, so a key
    matches only as written (a plain `map` string would match in any letter case)."""
    for key in keys:
        if not _KEY_ALPHABET.fullmatch(key):
            raise ValueError("an API key may hold only letters, digits, '_' and '-'")
    return "".join(f'"~^(?i:bearer) {key}$" 1;\n' for key in keys)


def nginx_string(value: str) -> str:
    """`value` as one double-quoted nginx token; ValueError unless it is a URL path of the safe
    characters (nothing nginx would read as syntax, a variable or an escape)."""
    return f'"{check_url_path(value)}"'


def nginx_conf(
    plan: RuntimePlan, *, keys: bool = True, tokens: bool = False, metrics: bool = False
) -> str:
    """The sidecar's nginx.conf: no keys in it, only the path of the key map in the Secret.
    `keys`: it checks the API keys in front of the runtime's ports; `tokens`: it asks the token
    verifier (TOKEN_CHECK_PORT, tokens.py) about every request without a valid key; `metrics`:
    it serves the runtime's metrics path, and nothing else, on PROXY_METRICS_PORT without a key."""
    upstream = f"{LOOPBACK}:{plan.http_port or plan.grpc_port}"
    guard = Guard(keys=keys, tokens=tokens)
    servers = []
    if guard.on and plan.http_port is not None:
        servers.append(_http_server(upstream, plan.health_path, guard))
    if guard.on and plan.grpc_port is not None:
        servers.append(_grpc_server(f"{LOOPBACK}:{plan.grpc_port}", guard))
    if metrics and plan.metrics_port is not None:
        servers.append(_metrics_server(f"{LOOPBACK}:{plan.metrics_port}"))
    key_map = ""
    if keys:
        key_map = _KEY_MAP.format(keys=f"{KEYS_MOUNT}/{names.NGINX_KEYS_KEY}")
    elif tokens:
        key_map = _NO_KEYS
    if tokens:  # kept-alive connections to the verifier: no new connection per request
        verifier = f"{LOOPBACK}:{TOKEN_CHECK_PORT}"
        key_map += f"  upstream longrun_token_check {{ server {verifier}; keepalive 8; }}\n"
    return _NGINX_MAIN.format(key_map=key_map, servers="".join(servers))


@dataclass(frozen=True)
class Guard:
    """What the sidecar checks in front of the runtime: API keys, tokens, or both (a request
    passes with either)."""

    keys: bool
    tokens: bool

    @property
    def on(self) -> bool:
        """True when the sidecar checks callers at all."""
        return self.keys or self.tokens

    def locations(self, proxy: str, *, refusal: str) -> str:
        """The guarded `location /` whose lines `proxy` pass a request on. Keys only: a request
        without a valid key gets `refusal` (the HTTP server's 401 text, or the gRPC server's
        bare 401). With tokens: a request with a valid key passes at once; any other goes to a
        named location where nginx asks the verifier (auth_request) and passes it only on 204.
        The verifier's reason comes back in a header, never its body."""
        if not self.tokens:
            challenge = "add_header WWW-Authenticate 'Bearer' always; " if refusal else ""
            check = f"      if ($longrun_key_ok = 0) {{ {challenge}return 401{refusal}; }}\n"
            return f"    location / {{\n{check}{proxy}    }}\n"
        return f"""\
    location / {{
      if ($longrun_key_ok = 0) {{ return 418; }}  # no valid key: the verifier decides
      recursive_error_pages on;  # 418 here, then the verifier's 401 there
      error_page 418 = {TOKEN_NAMED};
{proxy}    }}
    location {TOKEN_NAMED} {{
      auth_request {TOKEN_LOCATION};
      auth_request_set $longrun_auth_error $upstream_http_x_longrun_auth_error;
      error_page 401 = {REFUSED_LOCATION};
{proxy}    }}
"""

    def internal_locations(self, *, grpc: bool) -> str:
        """The verifier's subrequest and the 401 answer, inside a guarded server (nginx copies
        the verifier's WWW-Authenticate, with its error_description, onto the 401)."""
        if not self.tokens:
            return ""
        body = "" if grpc else ' \'{"error": "$longrun_auth_error"}\\n\''
        return f"""\
    location = {TOKEN_LOCATION} {{
      internal;
      proxy_pass http://longrun_token_check/check;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-Longrun-Key-Ok $longrun_key_ok;
      proxy_connect_timeout 2s;
      proxy_read_timeout 10s;
    }}
    location {REFUSED_LOCATION} {{
      return 401{body};
    }}
"""


_NGINX_MAIN = """\
# Generated by longrun: API-key check in front of the model server. No key is in this file.
worker_processes 1;
pid /tmp/nginx.pid;
error_log /dev/stderr warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  server_tokens off;
  client_body_temp_path /tmp/client_body;
  proxy_temp_path /tmp/proxy;
  fastcgi_temp_path /tmp/fastcgi;
  uwsgi_temp_path /tmp/uwsgi;
  scgi_temp_path /tmp/scgi;
  client_max_body_size 256m;
{key_map}{servers}}}
"""
_NO_KEYS = "  map $http_authorization $longrun_key_ok { default 0; }  # tokens only, no keys\n"
_KEY_MAP = """  map_hash_bucket_size 128;  # "Bearer <key>" is longer than the default bucket
  map $http_authorization $longrun_key_ok {{
    default 0;
    include {keys};
  }}
"""


def _http_server(upstream: str, health_path: str | None, guard: Guard) -> str:
    health = ""
    if health_path:
        where = nginx_string(health_path)
        health = f"    location = {where} {{ proxy_pass http://{upstream}; }}\n"
    proxy = """\
      proxy_pass http://runtime;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "";
      proxy_buffering off;
      proxy_read_timeout 3600s;
"""
    refusal = """ '{"error": "missing or invalid API key"}\\n'"""
    return f"""\
  upstream runtime {{ server {upstream}; keepalive 64; }}
  server {{
    listen {PROXY_HTTP_PORT};
{health}{guard.internal_locations(grpc=False)}{guard.locations(proxy, refusal=refusal)}  }}
"""


def _metrics_server(upstream: str) -> str:
    # Prometheus scrapes this port (the NetworkPolicy admits SERVING_METRICS_NAMESPACES): the
    # metrics path only, read-only, never a model endpoint.
    path = nginx_string(METRICS_PATH)
    return f"""\
  server {{
    listen {PROXY_METRICS_PORT};
    location = {path} {{
      limit_except GET {{ deny all; }}
      proxy_pass http://{upstream};
      proxy_set_header Authorization "";
    }}
    location / {{ return 404; }}
  }}
"""


def _grpc_server(upstream: str, guard: Guard) -> str:
    # A gRPC client maps HTTP 401 to UNAUTHENTICATED.
    proxy = f"""\
      grpc_set_header Authorization "";
      grpc_read_timeout 3600s;
      grpc_pass grpc://{upstream};
"""
    return f"""\
  server {{
    listen {PROXY_GRPC_PORT} http2;
{guard.internal_locations(grpc=True)}{guard.locations(proxy, refusal="")}  }}
"""


def proxy_ports(plan: RuntimePlan, *, guard: bool = True, metrics: bool = False) -> list[Manifest]:
    """The sidecar's container ports: the runtime's, named like them, when it `guard`s them
    (checks keys or tokens), and `metrics`."""
    ports: list[Manifest] = []
    if guard and plan.http_port is not None:
        ports.append({"name": "http", "containerPort": PROXY_HTTP_PORT, "protocol": "TCP"})
    if guard and plan.grpc_port is not None:
        ports.append({"name": "grpc", "containerPort": PROXY_GRPC_PORT, "protocol": "TCP"})
    if metrics and plan.metrics_port is not None:
        ports.append({"name": "metrics", "containerPort": PROXY_METRICS_PORT, "protocol": "TCP"})
    return ports


def proxy_container(
    image: str, plan: RuntimePlan, *, guard: bool = True, keys: bool = True, metrics: bool = False
) -> Manifest:
    """The nginx sidecar: config from the ConfigMap, the key map from the Secret. `guard`: it
    checks callers in front of the runtime's ports; `keys`: with API keys, as in nginx_conf
    (not with tokens alone)."""
    mounts: list[Manifest] = [
        {"name": CONF_VOLUME, "mountPath": PROXY_CONF_MOUNT, "readOnly": True},
        {"name": TMP_VOLUME, "mountPath": "/tmp"},
    ]
    if keys:
        mounts.insert(1, {"name": KEYS_VOLUME, "mountPath": KEYS_MOUNT, "readOnly": True})
    return {
        "name": names.AUTH_CONTAINER,
        "image": image,
        "command": ["nginx", "-c", f"{PROXY_CONF_MOUNT}/{names.NGINX_CONF_KEY}"],
        "args": ["-g", "daemon off;"],
        "ports": proxy_ports(plan, guard=guard, metrics=metrics),
        "volumeMounts": mounts,
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": restricted_container_security(),
    }


def keys_volume(secret_name: str, key: str) -> Manifest:
    """The Secret volume with just the one file a container reads (`api-keys` or the map)."""
    return {
        "name": KEYS_VOLUME,
        "secret": {
            "secretName": secret_name,
            "defaultMode": 0o440,
            "items": [{"key": key, "path": key}],
        },
    }


def config_volume(config_map: str) -> Manifest:
    """The ConfigMap volume with nginx.conf."""
    return {"name": CONF_VOLUME, "configMap": {"name": config_map}}
