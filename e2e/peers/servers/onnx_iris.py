"""Write a small ONNX iris classifier: `python onnx_iris.py OUT.onnx` (in the triton env).

Why a hand-built graph: no model download is possible and no training framework is in the
triton env, but a nearest-centroid classifier is one Gemm and one ArgMax, written with the
`onnx` helper API. Input `input` FP32 [batch, 4]; outputs `scores` FP32 [batch, 3] and
`predict` INT64 [batch, 1], the class index (0 setosa, 1 versicolor, 2 virginica):
[5.1, 3.5, 1.4, 0.2] → 0, [5.9, 3.0, 4.2, 1.5] → 1, [6.7, 3.0, 5.2, 2.3] → 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The iris class means (sepal length, sepal width, petal length, petal width).
CENTROIDS = (
    (5.006, 3.428, 1.462, 0.246),
    (5.936, 2.770, 4.260, 1.326),
    (6.588, 2.974, 5.552, 2.026),
)


def write_model(path: Path) -> None:
    """The classifier: score_k = x·c_k - |c_k|²/2, so the largest score is the nearest c_k."""
    import onnx
    from onnx import TensorProto, helper

    weights = [CENTROIDS[k][i] for i in range(4) for k in range(3)]
    bias = [-sum(v * v for v in c) / 2 for c in CENTROIDS]
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["input", "W", "B"], ["scores"]),
            helper.make_node("ArgMax", ["scores"], ["predict"], axis=1, keepdims=1),
        ],
        "iris",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("predict", TensorProto.INT64, ["batch", 1]),
        ],
        initializer=[
            helper.make_tensor("W", TensorProto.FLOAT, [4, 3], weights),
            helper.make_tensor("B", TensorProto.FLOAT, [3], bias),
        ],
    )
    # IR 8 / opset 17: what the pinned onnxruntime (and Triton's ONNX backend) read.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


if __name__ == "__main__":
    write_model(Path(sys.argv[1]))
