"""The `gcs` test plug-in's settings model: the first of the three places a storage plug-in takes.

A stand-in for a Google Cloud Storage backend, shaped like one: a bucket, a prefix, and a
service-account key in a Secret. The controller imports this module (through the entry point)
to validate the kind's settings and find their Secret, so it imports only pydantic and
contracts; the backend it names is imported by the runner alone.
"""

from __future__ import annotations

from pydantic import Field

from contracts.base import ObjectName, SecretReference
from contracts.plugins import StorageSettings


class GcsCredentials(SecretReference):
    """A Secret holding a service-account key: mounted by the controller, refused elsewhere."""

    key: str = Field(default="key.json", description="Secret key holding the JSON key.")
    namespace: ObjectName | None = Field(
        default=None, description="The Secret's namespace; only the run's own is allowed."
    )

    def secret_namespace(self) -> str | None:
        """The namespace the reference names, or None for the run's own."""
        return self.namespace


class GcsStorage(StorageSettings):
    """Objects under a prefix of a bucket, one per committed chunk."""

    backend = "plugin_backend.backend:GcsBackend"

    bucket: str = Field(min_length=3, max_length=63, description="Bucket name.")
    prefix: str = Field(min_length=1, description="Objects go under this prefix.")
    credentials_secret_ref: GcsCredentials = Field(description="The service-account key.")
