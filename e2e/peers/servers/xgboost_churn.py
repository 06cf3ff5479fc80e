"""Write the small xgboost churn model of testdata/examples/serving/mlserver.yaml:
`python xgboost_churn.py OUT.json` (in the mlserver env, which has xgboost).

Why synthetic: no data set can be downloaded, and the example needs a model whose answers a
test can judge. Four features per customer, `[tenure_months, monthly_charges,
support_calls, on_contract]`; a customer churns when a fixed score says so (short tenure,
high charges, many support calls, no contract). The model (binary:logistic, 20 trees of
depth 3, one thread, exact method) is deterministic for a given xgboost version:
testdata/serving-models/churn-xgboost.json was written with the mlserver env's pin, and the
example's `sha256` is its digest.
`[2, 95.0, 6, 0]` churns (probability > 0.5), `[60, 30.0, 0, 1]` does not.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROWS = 2000


def churns(tenure: float, charges: float, calls: float, contract: float) -> bool:
    """The rule the labels follow."""
    return -0.08 * tenure + 0.03 * charges + 0.6 * calls - 1.5 * contract - 1.0 > 0


def write_model(path: Path) -> None:
    """Train on ROWS synthetic customers and save the booster as JSON."""
    import numpy as np
    import xgboost

    rng = np.random.default_rng(7)
    features = np.column_stack(
        [
            rng.integers(1, 72, ROWS),
            rng.uniform(20, 120, ROWS).round(2),
            rng.integers(0, 8, ROWS),
            rng.integers(0, 2, ROWS),
        ]
    ).astype(np.float32)
    labels = np.array([churns(*row) for row in features], dtype=np.float32)
    params = {
        "objective": "binary:logistic",
        "max_depth": 3,
        "eta": 0.3,
        "nthread": 1,
        "seed": 0,
        "tree_method": "exact",
    }
    booster = xgboost.train(params, xgboost.DMatrix(features, label=labels), num_boost_round=20)
    path.parent.mkdir(parents=True, exist_ok=True)
    booster.save_model(str(path))


if __name__ == "__main__":
    write_model(Path(sys.argv[1]))
