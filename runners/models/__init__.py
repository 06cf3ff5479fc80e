"""Model protocol clients: one module per wire protocol, registered under `longrun.protocols`.

Each client is built as `Client(endpoint, ctx)` and implements `runners.api.ModelClient`.
`common` (auth, TLS, record-to-row mapping) and `http` (connections, error mapping) are the
only modules the protocol modules share.
"""
