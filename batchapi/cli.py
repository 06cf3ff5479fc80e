"""`longrun batch-api`: serve OpenAI's Files and Batches API, on a cluster or on this machine.

In a cluster (the chart's optional Deployment), batches are InferenceRuns created through the
Kubernetes API (in-cluster credentials or `--kubeconfig`), callers are authenticated and
authorised by the API server (TokenReview, SubjectAccessReview), and files live in an S3
bucket (`--s3-bucket`) or a directory on a claim (`--files-dir`, `--files-claim`).
`--local -f FILES` needs no cluster: batches run through `longrun run`, the key is in a file.

The first line on stdout is JSON, `{"url": ..., "apiKeyFile": ...}`, for scripts; logs go to
stderr. SIGTERM or Ctrl-C stops the server; batches go on (their state is not in it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from batchapi.settings import DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_REQUESTS, ApiSettings

SWEEP_SECONDS = 600
EXIT_OK, EXIT_USAGE = 0, 2


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `batch-api` to the `longrun` subcommands."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "batch-api",
        help="serve OpenAI's Files and Batches API (batches become InferenceRuns)",
        description="Serve OpenAI's /v1/files and /v1/batches: each batch is an InferenceRun "
        "(docs/batch-api.md).",
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="address to listen on (%(default)s)")
    add("--port", type=int, default=8000, help="port (%(default)s; 0: a free one)")
    add(
        "--max-file-bytes",
        type=int,
        default=DEFAULT_MAX_FILE_BYTES,
        help="largest upload in bytes (%(default)s, OpenAI's 200 MB); more: 413",
    )
    add(
        "--max-requests",
        type=int,
        default=DEFAULT_MAX_REQUESTS,
        help="most request lines in a batch file (%(default)s)",
    )
    add("--default-namespace", help="namespace of requests naming none (see docs)")
    add(
        "--namespace",
        action="append",
        default=[],
        dest="namespaces",
        metavar="NS",
        help="serve only these namespaces (repeatable; e.g. the claim's namespace)",
    )
    add("--files-dir", help="keep files in this directory (a PVC's mount path in a cluster)")
    add("--files-claim", help="the PersistentVolumeClaim --files-dir is mounted from")
    add("--s3-bucket", help="keep files in this S3 bucket")
    add("--s3-prefix", default="", help="key prefix in the bucket")
    add("--s3-endpoint-url", help="an S3-compatible store's endpoint")
    add("--s3-region", help="the bucket's region")
    add("--s3-path-style", action="store_true", help="path-style addressing")
    add(
        "--s3-runner-secret",
        metavar="NAME",
        help="Secret (in each run's namespace) with the runner's S3 credentials",
    )
    add("--kubeconfig", help="kubeconfig; default: in-cluster, else ~/.kube/config")
    add("--context", help="kubeconfig context")
    add("--audience", action="append", default=[], help="TokenReview audience (repeatable)")
    add("--local", action="store_true", help="no cluster: run batches with `longrun run`")
    add(
        "-f",
        "--filename",
        dest="files",
        action="append",
        default=[],
        metavar="PATH",
        help="--local: YAML with the annotated InferenceConfigs / ModelDeployments",
    )
    add("--work-dir", default=".longrun", help="--local: state directory (%(default)s)")
    add("--api-key-file", help="--local: the key (default: made in the work dir)")
    for flag, meta in (
        ("--pvc", "CLAIM=DIR"),
        ("--runtime-python", "RUNTIME=PYTHON"),
        ("--image-map", "IMAGE=COMMAND"),
        ("--env-file", "NAME=PATH"),
    ):
        add(flag, action="append", default=[], metavar=meta, help="--local: as for longrun run")
    add("--log-level", default="info", help="%(default)s")
    add("--log-format", default="json", choices=["json", "text"], help="%(default)s")
    parser.set_defaults(handler=handle)
    return parser


def handle(args: argparse.Namespace) -> int:
    """Build the server from the flags and serve until stopped."""
    from controller.runtime.logs import configure

    configure(level=args.log_level.upper(), fmt=args.log_format)
    try:
        api, key_file = build(args)
    except (ValueError, OSError) as exc:
        print(f"longrun batch-api: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE
    from batchapi.server import BatchApiServer

    server = BatchApiServer(api, host=args.host, port=args.port).start()
    print(json.dumps({"url": server.url + "/v1", "apiKeyFile": key_file}), flush=True)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    store = api.files.store
    while not done.wait(SWEEP_SECONDS):
        store.sweep(now=time.time())
    server.stop()
    return EXIT_OK


def build(args: argparse.Namespace) -> tuple[Any, str | None]:
    """The API object and the local key file (None in a cluster); ValueError for bad flags."""
    from batchapi.access import Gate
    from batchapi.batches import Batches
    from batchapi.files import Files
    from batchapi.server import BatchApi

    settings = ApiSettings(
        max_file_bytes=args.max_file_bytes,
        max_requests=args.max_requests,
        default_namespace=args.default_namespace or ("default" if args.local else None),
        namespaces=tuple(args.namespaces),
    )
    store = _store(args)
    store.sweep(now=time.time())
    if args.local:
        cluster, reviews, key_file = _local(args)
    else:
        cluster, key_file = _kube(args), None
        reviews = cluster
    files = Files(store, settings)
    batches = Batches(cluster, files)
    api = BatchApi(
        files=files,
        batches=batches,
        gate=Gate(reviews, settings),
        drain_limit=settings.max_file_bytes + 1024 * 1024,
    )
    return api, key_file


def _store(args: argparse.Namespace) -> Any:
    if args.s3_bucket and args.files_dir:
        raise ValueError("--s3-bucket and --files-dir: choose one place for files")
    if args.s3_bucket:
        from batchapi.s3store import S3Store

        s3 = S3Store(
            bucket=args.s3_bucket,
            prefix=args.s3_prefix,
            endpoint_url=args.s3_endpoint_url,
            region=args.s3_region,
            force_path_style=args.s3_path_style,
            runner_secret=args.s3_runner_secret,
        )
        s3.check()
        return s3
    from batchapi.store import DirectoryStore

    directory = args.files_dir or (
        str(Path(args.work_dir) / "batch-api" / "files") if args.local else None
    )
    if not directory:
        raise ValueError("name where files live: --s3-bucket BUCKET or --files-dir DIR")
    return DirectoryStore(Path(directory), claim=args.files_claim)


def _kube(args: argparse.Namespace) -> Any:
    from controller.kube import Transport, load_api_client
    from controller.kube.batchapi import KubeBatchCluster

    paths = [p for p in (args.kubeconfig or "").split(os.pathsep) if p]
    if paths and not any(os.path.isfile(p) for p in paths):
        raise ValueError(f"--kubeconfig {args.kubeconfig}: no such file")

    try:
        client = load_api_client(args.kubeconfig, context=args.context)
    except Exception as exc:  # the client's ConfigException, or a file it cannot parse
        raise ValueError(f"kubeconfig: {exc}") from None
    return KubeBatchCluster(Transport(client), audiences=tuple(args.audience))


def _local(args: argparse.Namespace) -> tuple[Any, Any, str]:
    from batchapi.local.access import LocalReviews, key_from
    from batchapi.local.cluster import LocalCluster
    from local.inputs import InputError, load_inputs

    if not args.files:
        raise ValueError(
            "--local needs -f FILE|DIR: the InferenceConfigs / ModelDeployments "
            "annotated longrun.dev/openai-model"
        )
    try:
        inputs = load_inputs(args.files, namespace="default")
    except InputError as exc:
        raise ValueError(str(exc)) from None
    templates = [*inputs.configs.values(), *inputs.deployments.values()]
    passed = [
        a
        for flag in ("pvc", "runtime_python", "image_map", "env_file")
        for value in getattr(args, flag)
        for a in ("--" + flag.replace("_", "-"), value)
    ]
    work = Path(args.work_dir)
    cluster = LocalCluster(work, templates=templates, files=list(args.files), run_args=passed)
    key_file = Path(args.api_key_file or work / "batch-api" / "api-key")
    key = key_from(key_file, create=args.api_key_file is None)
    return cluster, LocalReviews(key), str(key_file.resolve())
