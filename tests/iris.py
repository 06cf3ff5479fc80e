"""The iris flowers the example tests run (testdata/quickstart/iris.csv), as rows, as a SQL
table, and the accuracy of predictions against their species. Shared by the end-to-end
suite (tests/e2e) and the `longrun run` example tests (tests/local); no pytest fixtures."""

from __future__ import annotations

import csv
from typing import Any

import sqlalchemy as sa

from tests.support import REPO_ROOT

IRIS_CSV = REPO_ROOT / "testdata" / "quickstart" / "iris.csv"
SPECIES = ("setosa", "versicolor", "virginica")
Obj = dict[str, Any]


def iris_rows() -> list[Obj]:
    """The 150 flowers: `id` an int, the features floats, `species` a string."""
    with IRIS_CSV.open(newline="") as handle:
        return [
            {k: v if k == "species" else int(v) if k == "id" else float(v) for k, v in r.items()}
            for r in csv.DictReader(handle)
        ]


def class_of(prediction: Any) -> int:
    """The class index in whatever shape a server answers (scalar, [x], {"predict": x})."""
    while isinstance(prediction, (list, dict)):
        prediction = (
            next(iter(prediction.values())) if isinstance(prediction, dict) else prediction[0]
        )
    return int(prediction)


def accuracy(predicted: dict[int, int]) -> float:
    """Share of the flowers in `predicted` (id -> class) whose class is their species."""
    truth = {row["id"]: SPECIES.index(row["species"]) for row in iris_rows()}
    return sum(predicted[i] == truth[i] for i in predicted) / len(predicted)


def seed_iris(url: str, table: str, rows: list[Obj] | None = None) -> None:
    """`rows` (default: the 150 flowers) as a SQL table: `id` the key, floats and strings
    as the values are."""
    rows = rows or iris_rows()
    columns: list[sa.Column[Any]] = [sa.Column("id", sa.Integer, primary_key=True)]
    columns += [
        sa.Column(k, sa.Float if isinstance(v, float) else sa.String(32))
        for k, v in rows[0].items()
        if k != "id"
    ]
    engine = sa.create_engine(url)
    meta = sa.MetaData()
    created = sa.Table(table, meta, *columns)
    with engine.begin() as conn:
        meta.create_all(conn)
        conn.execute(created.insert(), rows)
    engine.dispose()


def sql_rows(url: str, table: str) -> list[Obj]:
    """Every row of `table`, as dicts."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(sa.text(f"SELECT * FROM {table}"))]
    engine.dispose()
    return rows
