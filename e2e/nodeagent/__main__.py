"""`python -m e2e.nodeagent --kubeconfig PATH`: a node that runs pods, until Ctrl-C or SIGTERM.

For people beside `python -m e2e.cluster --real`, and for harnesses that start it
as a process: `--ready-file` appears once the Node is registered and the pods
are listed; SIGTERM stops it cleanly (its processes killed, nothing marked) and
it exits 0.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

from local.podspec import parse_image_map

from .agent import NodeAgent
from .config import DEFAULT_NODE_NAME, DEFAULT_SCHEDULER, AgentConfig, default_images
from .kube import Kube
from .logs import KubeletTLS
from .scripted import ScriptedPods


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m e2e.nodeagent", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--node-name", default=DEFAULT_NODE_NAME)
    parser.add_argument(
        "--namespace",
        action="append",
        dest="namespaces",
        help="serve only this namespace (repeatable; default: every namespace)",
    )
    parser.add_argument(
        "--scheduler-name",
        action="append",
        dest="scheduler_names",
        help="bind pods of this schedulerName (repeatable; default: default-scheduler)",
    )
    parser.add_argument("--workdir", type=Path, help="pod files and logs (default: a temp dir)")
    parser.add_argument(
        "--image-map",
        action="append",
        default=[],
        metavar="IMAGE=COMMAND",
        help="run IMAGE as COMMAND (repeatable); the runner image is built in",
    )
    parser.add_argument("--pvc-root", type=Path, help="PersistentVolumeClaim dirs (default: "
                        "<workdir>/pvc/<namespace>/<claim>)")  # fmt: skip
    parser.add_argument("--restart-backoff", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument("--tls-cert-file", type=Path, help="the log server's certificate "
                        "(default: a self-signed one)")  # fmt: skip
    parser.add_argument("--tls-private-key-file", type=Path)
    parser.add_argument(
        "--client-ca-file",
        type=Path,
        help="CA of the clients (kube-apiserver); default: anonymous clients",
    )
    parser.add_argument("--port", type=int, default=0, help="the log server's port (0: any)")
    parser.add_argument("--ready-file", type=Path, help="touched once the agent is ready")
    parser.add_argument(
        "--scripted",
        nargs="?",
        const="",
        metavar="MESSAGE",
        help="run every container as a scripted one (scripted.py) that exits 0 at once, with "
        "MESSAGE as its termination message: for measurements of what is around pods",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def kubelet_tls(args: argparse.Namespace) -> KubeletTLS | None:
    """The log server's certificates (None: a self-signed one, anonymous clients)."""
    cert, key, client_ca = args.tls_cert_file, args.tls_private_key_file, args.client_ca_file
    if (cert is None) != (key is None) or (client_ca is not None and cert is None):
        sys.exit(
            "error: --tls-cert-file and --tls-private-key-file go together, "
            "and --client-ca-file needs them"
        )
    missing = [str(f) for f in (cert, key, client_ca) if f is not None and not f.is_file()]
    if missing:
        sys.exit(f"error: no such file: {', '.join(missing)}")
    return None if cert is None else KubeletTLS(cert, key, client_ca)


def _scripted(message: str) -> ScriptedPods:
    pods = ScriptedPods()
    pods.script(exit_code=0, message=message)
    return pods


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tls = kubelet_tls(args)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(message)s")
    own_workdir = args.workdir is None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="longrun-nodeagent-"))
    config = AgentConfig(
        workdir=workdir,
        node_name=args.node_name,
        namespaces=tuple(args.namespaces) if args.namespaces else None,
        scheduler_names=tuple(args.scheduler_names or [DEFAULT_SCHEDULER]),
        images=default_images(parse_image_map(args.image_map)),
        pvc_root=args.pvc_root,
        restart_backoff=args.restart_backoff,
        kubelet_tls=tls,
        kubelet_port=args.port,
        scripted=None if args.scripted is None else _scripted(args.scripted),
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    agent = NodeAgent(config, Kube.from_kubeconfig(args.kubeconfig))
    try:
        agent.start()
        if args.ready_file:
            args.ready_file.write_text(config.node_name + "\n")
        served = f", logs on port {agent.logs.port}" if agent.logs is not None else ""
        print(
            f"node agent ready: node {config.node_name}, workdir {workdir}{served}", file=sys.stderr
        )
        done.wait()
    finally:
        agent.stop()
        agent.kube.close()
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
