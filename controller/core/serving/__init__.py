"""The serving half's pure core: ModelDeployment (+ Model) in, children and status out.

No I/O, no clock, no client, like the rest of `controller.core`. Entry points for the
reconciler and for `longrun serve`:

- `decide.decide_deployment(observed, settings, now=..., entropy=...)` → `ServingDecision`
  (child writes, status, deletions, requeue_after): the whole reconcile decision;
- `observed.ServingObserved` / `ServingChildren`: what the observer must read;
- `resolve.resolve_deployment(...)` → `ServingResolved`: the spec with its model, layout
  and runtime plan (`runtimes.RuntimePlan`), which local mode maps to a local command;
- `builders` / `network`: the manifests, `names`: their deterministic names and labels;
- `status.deployment_status` and `status.normalize` (compare before patching /status).
"""
