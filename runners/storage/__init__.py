"""Built-in storage backends, one module per kind, registered by entry points.

Backends never import each other (or the model clients): what they share lives in
`runners.formats` and `runners.api`.
"""
