"""The official `openai` package's own models as the judge of the server's objects.

`openai.types.Batch` and `FileObject` accept unknown keys (extra="allow"); here they are
validated with extra keys forbidden at every level: the model is subclassed with
`extra="forbid"`, and every nested model (errors, request_counts, usage) must have kept no
extra key either.
"""

from __future__ import annotations

from typing import Any

import pydantic
from openai.types import Batch, FileDeleted, FileObject

MODELS: dict[str, type[pydantic.BaseModel]] = {
    "batch": Batch,
    "file": FileObject,
    "deleted": FileDeleted,
}


def strict(kind: str, data: dict[str, Any]) -> pydantic.BaseModel:
    """`data` validated as the openai model of `kind`, no extra key allowed anywhere."""
    base = MODELS[kind]
    config = {**base.model_config, "extra": "forbid"}
    forbidding = type(f"Strict{base.__name__}", (base,), {"model_config": config})
    checked = forbidding.model_validate(data)
    _no_extra(checked, kind)
    return checked


def _no_extra(value: Any, where: str) -> None:
    if isinstance(value, pydantic.BaseModel):
        extra = value.__pydantic_extra__ or {}
        assert not extra, f"{where}: keys the openai model does not know: {sorted(extra)}"
        for name in type(value).model_fields:
            _no_extra(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _no_extra(item, f"{where}[{index}]")
