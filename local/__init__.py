"""Local execution: `longrun run` runs a rendered runner pod as a subprocess, no cluster needed.

A third shell over the controller's core, beside the Kubernetes adapter and the
runtime (which it never imports): it must render exactly what the controller
would, so it uses the core's builders and status, and it never imports
`runners`: the runner is started as a process, as the kubelet would start its
container. `run` is the command, `occurrence` one Job of the run, `schedule`
the times of a scheduled run, `job` the Job controller's retry rules,
`podspec` what a pod spec means on this machine, `executor` the process
(also the e2e harness's kubelet), `inputs` the files given, `display` what the
user sees.
"""
