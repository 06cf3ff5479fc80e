"""longrun's controller: reconciler, Kubernetes I/O shell, CRD generation and the CLI."""

__version__ = "0.1.0"
