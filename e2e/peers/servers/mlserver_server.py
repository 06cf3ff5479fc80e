"""Seldon MLServer with mlserver-sklearn serving an iris model trained here.

Runs inside the ``mlserver`` env (mlserver, mlserver-sklearn, scikit-learn), never in the project
env. Why train at start-up: ``load_iris`` ships with scikit-learn, so no download and no model file
to keep in the repository; fitting takes milliseconds. The model is saved with joblib into a
model directory with the usual ``settings.json`` / ``model-settings.json`` files, then served by
the real ``mlserver start``. Ports are explicit (the defaults 8080-8082 collide with KServe) and
``parallel_workers`` is 0 (PEERS.md: > 0 crashes with uvloop >= 0.22, and is slower here).
Output ``predict`` INT64 (class index); any FP32/FP64 [-1, 4] input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--model-name", default="iris")
    return parser.parse_args()


def write_model_repository(args: argparse.Namespace) -> Path:
    """Train, save and describe the model; return the repository root for ``mlserver start``."""
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    root: Path = args.workdir / "models"
    model_dir = root / args.model_name
    model_dir.mkdir(parents=True)
    features, labels = load_iris(return_X_y=True)
    joblib.dump(
        LogisticRegression(max_iter=1000).fit(features, labels),
        model_dir / "model.joblib",
    )
    settings = {
        "host": args.host,
        "http_port": args.http_port,
        "grpc_port": args.grpc_port,
        "metrics_port": args.metrics_port,
        "parallel_workers": 0,
        "debug": False,
        "model_repository_root": str(root),
    }
    model_settings = {
        "name": args.model_name,
        "implementation": "mlserver_sklearn.SKLearnModel",
        "parameters": {"uri": "./model.joblib"},
    }
    (root / "settings.json").write_text(json.dumps(settings))
    (model_dir / "model-settings.json").write_text(json.dumps(model_settings))
    return root


def main() -> None:
    from mlserver.cli.main import main as mlserver_main

    root = write_model_repository(_parse_args())
    sys.argv = ["mlserver", "start", str(root)]
    mlserver_main()


if __name__ == "__main__":
    main()
