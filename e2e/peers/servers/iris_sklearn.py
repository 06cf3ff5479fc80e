"""Write an sklearn iris classifier with joblib: `python iris_sklearn.py OUT.joblib` (in the
kserve or mlserver env, which have scikit-learn).

The iris data ships with scikit-learn (no download); a LogisticRegression fits it in well
under a second. [5.1, 3.5, 1.4, 0.2] → 0, [5.9, 3.0, 4.2, 1.5] → 1, [6.7, 3.0, 5.2, 2.3] → 2.
"""

from __future__ import annotations

import sys
from pathlib import Path


def write_model(path: Path) -> None:
    """Fit on the iris data and save with joblib."""
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    features, labels = load_iris(return_X_y=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    joblib.dump(LogisticRegression(max_iter=1000).fit(features, labels), path)


if __name__ == "__main__":
    write_model(Path(sys.argv[1]))
