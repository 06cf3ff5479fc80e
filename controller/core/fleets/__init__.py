"""External hosts (InferenceHost) and the models they serve (InferenceModel): pure decisions.

What the fleet reconciler (controller/reconcile/fleets.py) decides from plain data, with no
I/O: which hosts are fit to serve (`hosts.py`, from the health the prober observed:
`health.py`), where each replica goes (`placement.py`: by free capacity, one replica per
host, sticky), the Service and EndpointSlice of each model (`builders.py`), the statuses
(`status.py`), and what to ask the hosts' admin APIs (`decide.py`). Names and keys are in
`names.py`, the address rules every host connection and slice address obeys in
`addresses.py`. The HTTP calls themselves live outside the core, in controller/hosts/.
"""
