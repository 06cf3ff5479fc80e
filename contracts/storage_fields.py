"""Settings several storage kinds share: the record format, `idField` and `recordField`.

Kept apart from contracts/storage.py (the kinds themselves) so that the table of kinds stays
readable; the kinds import their shared fields from here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

# How a file or an S3 object holds records. `openai-batch`: one OpenAI Batch API request per
# line in, one OpenAI batch output line per record out (docs/llm-batch.md). `parquet`: Apache
# Parquet tables, read by row group, one Parquet part per chunk out (runners/parquet.py).
OPENAI_BATCH = "openai-batch"
PARQUET = "parquet"
Format = Literal["csv", "jsonl", "openai-batch", "parquet"]
FieldName = Annotated[str, StringConstraints(min_length=1, max_length=253)]

FORMAT_DOC = (
    "csv, jsonl, parquet (Apache Parquet: read by row group, one Parquet file per chunk out) or "
    "openai-batch (OpenAI Batch API request lines in, OpenAI batch output lines out: "
    "docs/llm-batch.md)."
)
_INCLUDE_INPUT_DOC = (
    "Output only, format parquet: whether each output part carries the input record as a "
    "struct column `input` beside `prediction`. Default: false (id and position identify the "
    "record). The error output always carries the input, so failed records can be re-run."
)
SQL_FORMAT_DOC = (
    "Input only: openai-batch reads each row as an OpenAI Batch API request: columns custom_id, "
    "method, url and body (a JSON column or JSON text), or the whole request as JSON under "
    "recordField (docs/llm-batch.md)."
)
ID_FIELD_DOC = (
    "Field (column) whose value is the record's stable id, used to resume and to de-duplicate. "
    "Default: a SQL table's single-column primary key, else the record's position. Not with "
    "format openai-batch, whose records are keyed by their custom_id."
)
_RECORD_FIELD_DOC = (
    "Input only: each row was written by an earlier run (its error output, to re-run only the "
    "failed records) and the record to run is the JSON object under this field, `input`. Its "
    "id is the row's `id` (`record_id` in a SQL table), so results keep the earlier run's ids; "
    "idField, when set, names a field of that record instead. A row with no object there, or "
    "one the earlier run could not read (`input: {}`), goes to the error output again. With "
    "format openai-batch the object is an OpenAI batch request, keyed by its custom_id."
)


def include_input_setting() -> Any:
    """The `includeInput` setting of the storage kinds that write Parquet (file, s3)."""
    return Field(default=None, description=_INCLUDE_INPUT_DOC)


def record_field_setting() -> Any:
    """The `recordField` setting of the storage kinds an error output can be read back from."""
    return Field(default=None, description=_RECORD_FIELD_DOC)
