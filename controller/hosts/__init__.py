"""The controller's door to external hosts: HTTP to inference daemons, nothing else.

Beside `controller.kube` (the door to Kubernetes), this adapter is the only part of the
controller that opens connections to InferenceHosts: `guard.py` clears every address
before a connection is made (controller/core/fleets/addresses.py says which), `client.py`
speaks JSON over http.client with no redirects and bounded answers, `protocols/` are the
admin protocols (openai, ollama, inferenced, and plug-ins), and `prober.py` checks every
host on an interval and runs the admin calls in the background. The fleet reconciler sees
all this only through the core's `HostAgent` port.
"""
