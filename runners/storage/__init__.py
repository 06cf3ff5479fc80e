"""Built-in storage backends, one module per kind, each named by its kind's settings model.

Backends never import each other (or the model clients): what they share lives in
`runners.formats`, `runners.httpio`, `runners.tls` and `runners.api`, and here in two
modules that are no backend: `owners` (whose output a file directory or an S3 prefix
holds) and `receipts` (which chunks an HTTP receiver says it holds).
"""
