"""Built-in storage backends, one module per kind, each named by its kind's settings model.

Backends never import each other (or the model clients): what they share lives in
`runners.formats`, `runners.httpio`, `runners.tls` and `runners.api`.
"""
