"""`longrun batch-api`: OpenAI's Files and Batches API in front of InferenceRuns.

A shell over what exists, like `longrun run` and the controller: a batch is an InferenceRun in
the caller's namespace whose input is the uploaded file (`format: openai-batch`), and whose
output and error files are the run's outputs; its status is read from the run's status. All
state lives in the cluster (runs, their configs) and in the file store (uploads and outputs),
never in this process, so the server can be killed and restarted, or run as several replicas.

Layers inside: pure decisions (`ids`, `lines`, `templates`, `manifests`, `lifecycle`) have no
I/O; `service` applies them through the narrow ports of `ports` (the cluster, the file store);
`server` is the HTTP front; `cli` wires a backend: a Kubernetes API server through the
controller's adapter (`controller.kube.batchapi`), or this machine (`batchapi.local`).
"""
