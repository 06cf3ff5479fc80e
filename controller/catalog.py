"""`longrun catalog list` and `longrun catalog sync`: the model catalog from the shell.

`list` prints the catalog as a table, one row per variant (what Foundry Local's docs get
from the ConfigMap with a `jq` one-liner), read from the cluster's ConfigMap or from a file.
`sync` is what the chart's CronJob runs: it downloads a catalog, checks it with the same
schema the controller uses (contracts/serving/catalog.py), and only then writes it into the
ConfigMap with the time and URL of the sync in annotations. A download that fails or a
catalog that is not valid leaves the ConfigMap as it was, and the command says why on one
line of stderr and exits 1 (2 for bad flags).
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from contracts.serving import CATALOG_KEY, Catalog, CatalogError, parse_catalog
from controller.core.ports import ApiError
from controller.kube.transport import MERGE_PATCH, Transport, load_api_client, resource_path

DEFAULT_CONFIG_MAP = "longrun-system/longrun-model-catalog"
SYNCED_AT = "longrun.dev/catalog-synced-at"
SYNCED_FROM = "longrun.dev/catalog-source"
MAX_BYTES = 1_000_000  # a ConfigMap holds at most 1 MiB
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
COLUMNS = ("ALIAS", "TASK", "COMPUTE", "FORMAT", "SIZE", "SOURCE")


class SyncError(Exception):
    """Why a catalog was not listed or synced, in one line."""


def catalog_rows(catalog: Catalog) -> list[tuple[str, ...]]:
    """One row per variant: alias, task, compute, format, size, source."""
    rows: list[tuple[str, ...]] = []
    for entry in catalog.models:
        for compute in entry.variants:
            spec = entry.model_spec(compute)
            size = entry.size_of(compute) or "-"
            rows.append((entry.name, spec.resolved_task(), compute, spec.format, size, spec.source))
    return rows


def format_table(rows: list[tuple[str, ...]]) -> str:
    """Rows under the column names, left-aligned as kubectl prints them."""
    table = [COLUMNS, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS) - 1)]
    lines = [
        "   ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
        for row in table
    ]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def load_text(text: str, *, where: str) -> Catalog:
    """A catalog from YAML text: catalog.yaml itself, or a ConfigMap manifest holding it."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SyncError(f"{where} is not YAML: {' '.join(str(exc).split())}") from None
    if isinstance(document, dict) and document.get("kind") == "ConfigMap":
        inner = (document.get("data") or {}).get(CATALOG_KEY)
        if inner is None:
            raise SyncError(f"{where}: the ConfigMap has no data key {CATALOG_KEY}")
        return load_text(str(inner), where=f"{where} ({CATALOG_KEY})")
    try:
        return parse_catalog(document)
    except CatalogError as exc:
        raise SyncError(f"{where} is not a valid catalog: {exc}") from None


def split_config_map(value: str) -> tuple[str, str]:
    """`namespace/name` of the catalog ConfigMap; ValueError otherwise."""
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise ValueError(f"--configmap {value!r}: write namespace/name")
    return namespace, name


class CatalogMap:
    """The catalog ConfigMap through the API server (one GET, one PATCH or POST)."""

    def __init__(self, transport: Transport, namespace: str, name: str) -> None:
        self.transport, self.namespace, self.name = transport, namespace, name

    @property
    def where(self) -> str:
        """The ConfigMap as people name it."""
        return f'ConfigMap "{self.namespace}/{self.name}"'

    def read(self) -> dict[str, Any] | None:
        """The ConfigMap, or None when it does not exist."""
        path = resource_path("ConfigMap", self.namespace, name=self.name)
        try:
            found: dict[str, Any] = self.transport.request("GET", path)
        except ApiError as exc:
            if exc.is_not_found:
                return None
            raise SyncError(f"reading {self.where} failed ({exc.status}): {exc.message}") from None
        return found

    def write(self, text: str, *, url: str, now: datetime) -> None:
        """Put the catalog text in, with when and where it came from."""
        meta = {"annotations": {SYNCED_AT: now.strftime("%Y-%m-%dT%H:%M:%SZ"), SYNCED_FROM: url}}
        try:
            if self.read() is None:
                body = {"metadata": {"name": self.name, **meta}, "data": {CATALOG_KEY: text}}
                path = resource_path("ConfigMap", self.namespace)
                self.transport.request("POST", path, body=body)
            else:
                path = resource_path("ConfigMap", self.namespace, name=self.name)
                patch = {"metadata": meta, "data": {CATALOG_KEY: text}}
                self.transport.request("PATCH", path, body=patch, content_type=MERGE_PATCH)
        except ApiError as exc:
            raise SyncError(f"writing {self.where} failed ({exc.status}): {exc.message}") from None


def download(url: str, *, timeout: float = 60.0) -> str:
    """The text at `url` (http or https), at most MAX_BYTES; SyncError otherwise."""
    if not url.startswith(("https://", "http://")):
        raise SyncError(f"--url {url!r}: use an http:// or https:// URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            data = answer.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise SyncError(f"downloading {url} failed: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SyncError(f"downloading {url} failed: {reason}") from None
    if len(data) > MAX_BYTES:
        raise SyncError(f"{url} is larger than a ConfigMap can hold ({MAX_BYTES} bytes)")
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise SyncError(f"{url} is not UTF-8 text") from None


def sync(url: str, target: CatalogMap, *, now: Callable[[], datetime]) -> int:
    """Download, check, write; the number of entries written. SyncError leaves it as it was."""
    text = download(url)
    catalog = load_text(text, where=url)
    target.write(text, url=url, now=now())
    return len(catalog.models)


def _transport(args: argparse.Namespace) -> Transport:
    return Transport(load_api_client(args.kubeconfig, context=args.context))


def _cmd_list(args: argparse.Namespace) -> int:
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            print(f"longrun catalog list: {args.file}: no such file", file=sys.stderr)
            return EXIT_USAGE
        catalog = load_text(path.read_text(), where=str(path))
    else:
        where = split_config_map(args.configmap)
        target = CatalogMap(_transport(args), *where)
        found = target.read()
        text = ((found or {}).get("data") or {}).get(CATALOG_KEY)
        if text is None:
            raise SyncError(f"{target.where} does not exist or has no {CATALOG_KEY}")
        catalog = load_text(str(text), where=target.where)
    sys.stdout.write(format_table(catalog_rows(catalog)))
    return EXIT_OK


def _cmd_sync(args: argparse.Namespace) -> int:
    where = split_config_map(args.configmap)
    target = CatalogMap(_transport(args), *where)
    count = sync(args.url, target, now=lambda: datetime.now(UTC))
    print(f"synced {count} catalog entries from {args.url} into {target.where}")
    return EXIT_OK


def _run(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except ValueError as exc:
            print(f"longrun catalog: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except SyncError as exc:
            print(f"longrun catalog {args.catalog_command}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except Exception as exc:  # the cluster unreachable, a kubeconfig unreadable: one line
            said = " ".join(str(exc).split())[:300]
            print(
                f"longrun catalog {args.catalog_command}: {type(exc).__name__}: {said}",
                file=sys.stderr,
            )
            return EXIT_FAILED

    return wrapped


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `catalog list` and `catalog sync` to the `longrun` CLI."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "catalog", help="list or sync the model catalog (docs/serving.md, 'Model catalog')"
    )
    sub = parser.add_subparsers(dest="catalog_command", required=True, metavar="ACTION")
    listing = sub.add_parser("list", help="print the catalog as a table, one row per variant")
    listing.add_argument("-f", "--file", help="a catalog.yaml, or a ConfigMap manifest holding one")
    syncing = sub.add_parser("sync", help="download a catalog, check it, write the ConfigMap")
    syncing.add_argument("--url", required=True, help="where the catalog.yaml is (http, https)")
    for command in (listing, syncing):
        command.add_argument(
            "--configmap",
            default=DEFAULT_CONFIG_MAP,
            metavar="NAMESPACE/NAME",
            help="the catalog ConfigMap (%(default)s)",
        )
        command.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
        command.add_argument("--context", default=None, help="kubeconfig context")
    listing.set_defaults(handler=_run(_cmd_list))
    syncing.set_defaults(handler=_run(_cmd_sync))
    return parser
