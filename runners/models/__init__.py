"""Model protocol clients: one module per wire protocol, listed in BUILTIN_PROTOCOLS (contracts).

Each client is built as `Client(endpoint, ctx)` and implements `runners.api.ModelClient`.
`common` (auth, record-to-row mapping) and `http` (connections, error mapping) are the
only modules the protocol modules share; TLS settings come from `runners.tls`.
"""
