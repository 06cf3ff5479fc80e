"""Kueue, the job-queueing system of shared clusters: what a run's Jobs carry for it, how its
Workload is read and steered, and the run's `Queued` status. Pure, like the rest of the core.

- `policy`: the queue and priority labels, whether Kueue manages a Job, the allow-lists;
- `workload`: reading a Job's Workload, and the one field of it longrun writes (`spec.active`);
- `status`: the run's phase and conditions while Kueue decides (Queued, Preempted).

docs/shared-clusters.md says the same for people.
"""
