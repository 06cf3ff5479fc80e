"""Text of a Model or ModelDeployment that ends up in file paths, command lines and nginx.conf.

A served name becomes a directory of Triton's model repository, a `--model_name=` and a
health path; a path becomes a `location` of the auth sidecar's nginx.conf and an Ingress
rule; an S3 endpoint URL becomes the download's `--endpoint-url`. Issue 26 found the first
two pasted raw: a `healthPath` holding nginx syntax made the sidecar serve every path
without a key, and a `servedName` holding `../` moved the model outside its repository. So
each is refused unless it is plain text of its kind, here (pydantic) and in the CRD (the CEL
rule beside it, with the same words); the builders quote what they paste as well
(controller/core/serving/auth.py).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

from contracts.base import cel

SERVED_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
SERVED_NAME_HELP = (
    "must be a plain name: letters, digits, '.', '_' and '-', starting with a letter or digit, "
    "without '..' (it names a directory and a route of the model server)"
)
# RFC 3986's unreserved characters and '/': what ingress-nginx's strict path check accepts for
# a Prefix path, and nothing nginx.conf or a shell reads specially.
URL_PATH_PATTERN = r"^/[A-Za-z0-9._~/-]*$"
URL_PATH_HELP = (
    "must be a URL path: '/' then letters, digits, '-', '.', '_', '~' and '/', without '//' "
    "or a '.' or '..' segment (no query, spaces, quotes or percent-encoding)"
)
_DOT_SEGMENT = re.compile(r"/\.\.?(/|$)")
# An S3-compatible store's URL: http(s), a host, an optional path; no user@, query or spaces.
ENDPOINT_URL_PATTERN = r"^https?://[^/@?# ]+(/[^?# ]*)?$"
ENDPOINT_URL_HELP = (
    "must be an http:// or https:// URL of an S3-compatible store, without credentials "
    "(user:password@: put them in the credentials Secret), query or spaces"
)


def check_served_name(value: str) -> str:
    """`value` if it is a plain served name, else ValueError saying what one is."""
    if not re.match(SERVED_NAME_PATTERN, value) or ".." in value:
        raise ValueError(SERVED_NAME_HELP)
    return value


def check_url_path(value: str) -> str:
    """`value` if it is a URL path of the safe characters, else ValueError saying which."""
    if not re.match(URL_PATH_PATTERN, value) or "//" in value or _DOT_SEGMENT.search(value):
        raise ValueError(URL_PATH_HELP)
    return value


def check_endpoint_url(value: str) -> str:
    """`value` if it is an S3 endpoint URL, else ValueError saying what one is."""
    if not re.match(ENDPOINT_URL_PATTERN, value) or any(c.isspace() for c in value):
        raise ValueError(ENDPOINT_URL_HELP)
    return value


ServedName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253),
    AfterValidator(check_served_name),
    Field(
        json_schema_extra=cel(
            f"self.matches('{SERVED_NAME_PATTERN}') && !self.contains('..')", SERVED_NAME_HELP
        )
    ),
]
UrlPath = Annotated[
    str,
    StringConstraints(min_length=1, max_length=1024),
    AfterValidator(check_url_path),
    Field(
        json_schema_extra=cel(
            f"self.matches('{URL_PATH_PATTERN}') && !self.contains('//') && "
            "!self.matches('/[.][.]?(/|$)')",
            URL_PATH_HELP,
        )
    ),
]
EndpointUrl = Annotated[
    str,
    StringConstraints(max_length=2048),
    AfterValidator(check_endpoint_url),
    Field(json_schema_extra=cel(f"self.matches('{ENDPOINT_URL_PATTERN}')", ENDPOINT_URL_HELP)),
]
