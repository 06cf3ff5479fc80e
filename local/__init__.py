"""Local execution: run a rendered runner pod as a subprocess (`longrun run`, the e2e harness).

It lives in the controller because `longrun run` is a user-facing command and
must render exactly what the controller would; it never imports `runners`: the
runner is started as a process, as the kubelet would start its container.
"""
