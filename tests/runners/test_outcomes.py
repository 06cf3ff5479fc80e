"""runners.outcomes.Outcomes: a batch's outcomes as plain values that read like a list of Outcomes.

Nothing is faked: a pure value type.
"""

from __future__ import annotations

import pytest

from runners.api import Prediction, RecordFailure
from runners.outcomes import Outcomes

BAD = RecordFailure("bad row")


def test_reads_as_predictions_with_failures_in_their_places() -> None:
    outcomes = Outcomes([1, None, 3], {1: BAD})
    assert len(outcomes) == 3
    assert outcomes[0] == Prediction(1) and outcomes[1] == BAD
    assert outcomes[-1] == Prediction(3) and outcomes[-2] == BAD
    assert outcomes[1:] == [BAD, Prediction(3)]
    assert list(outcomes) == [Prediction(1), BAD, Prediction(3)]


def test_index_out_of_range_raises_index_error_like_a_list() -> None:
    with pytest.raises(IndexError):
        Outcomes([1])[1]


def test_equals_lists_tuples_and_outcomes_with_the_same_outcomes_only() -> None:
    outcomes = Outcomes(["a", None], {1: BAD})
    assert outcomes == [Prediction("a"), BAD]
    assert [Prediction("a"), BAD] == outcomes
    assert outcomes == (Prediction("a"), BAD)
    assert outcomes == Outcomes(["a", "ignored"], {1: BAD})
    assert outcomes != [Prediction("a"), Prediction(None)]
    assert outcomes != Outcomes(["a", None])
    assert outcomes != "a"


def test_of_a_list_keeps_values_and_failures_by_index() -> None:
    outcomes = Outcomes.of([Prediction({"x": 1}), BAD, Prediction(None)])
    assert outcomes.values == [{"x": 1}, None, None]
    assert outcomes.failures == {1: BAD}
    assert list(outcomes) == [Prediction({"x": 1}), BAD, Prediction(None)]


def test_of_outcomes_is_the_same_object() -> None:
    outcomes = Outcomes([1])
    assert Outcomes.of(outcomes) is outcomes


def test_of_refuses_anything_but_predictions_and_failures_naming_the_position() -> None:
    with pytest.raises(TypeError, match="outcome 1 is a int, not a Prediction or a RecordFailure"):
        Outcomes.of([Prediction(1), 2])  # type: ignore[list-item]
