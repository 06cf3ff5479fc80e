"""Read what the kubelet reports about server pods: why they are not serving. Pure.

Each cause becomes a `PodIssue` with a sentence that names it, as a person would look
for it with `kubectl describe pod`: the model download (the init container) failed, an
image cannot be pulled, a container is crash-looping, or no node can take the pod (a
GPU request most of all). Messages quote the kubelet's and the fetch program's words,
never a container's logs, so nothing the server prints (keys included) reaches status.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from controller.core.serving import names

Obj = dict[str, Any]
# A pod waits in these while a Secret or ConfigMap it mounts is missing (the kubelet says
# ContainerCreating for a missing volume, CreateContainerConfigError for a missing env key).
START_WAIT_REASONS = frozenset({"ContainerCreating", "CreateContainerConfigError"})
IMAGE_PULL_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
FETCH_EXIT_MEANINGS = {
    2: "the download was refused, or the source or the arguments are invalid",
    3: "the downloaded file's sha256 does not match spec.sha256",
    4: "the source was not found or access was denied (check the credentials Secret)",
    5: "a network or storage error",
}
QUOTE_MAX = 500


@dataclass(frozen=True)
class PodIssue:
    """Why pods do not serve: the phase it means when none is ready, a reason, a sentence."""

    phase: Literal["Failed", "Pending"]
    reason: str
    message: str


def _statuses(pod: Obj, key: str) -> list[Obj]:
    return list((pod.get("status") or {}).get(key) or [])


def _fetch_status(pod: Obj) -> Obj | None:
    statuses = _statuses(pod, "initContainerStatuses")
    return next((s for s in statuses if s.get("name") == names.FETCH_CONTAINER), None)


def _terminated(status: Obj, which: str) -> Obj:
    return dict(((status.get(which) or {}).get("terminated")) or {})


def _quote(text: object) -> str:
    value = " ".join(str(text or "").split())
    return value if len(value) <= QUOTE_MAX else value[: QUOTE_MAX - 1] + "…"


def download_state(pods: Sequence[Obj]) -> str:
    """ "done" when any pod has the model, else "failed", "running" or "waiting"."""
    states = {_fetch_state(s) for p in pods if (s := _fetch_status(p)) is not None}
    for state in ("done", "failed", "running"):
        if state in states:
            return state
    return "waiting"


def _fetch_state(status: Obj) -> str:
    state = status.get("state") or {}
    if _terminated(status, "state").get("exitCode") == 0:
        return "done"
    if "running" in state:
        return "running"
    if _terminated(status, "state") or _terminated(status, "lastState"):
        return "failed"
    return "waiting"


def may_lack_secret(pods: Sequence[Obj]) -> bool:
    """True when a pod waits to create its containers, as it does without its key Secret."""
    return any(
        waiting.get("reason") in START_WAIT_REASONS for pod in pods for _, waiting in _waiting(pod)
    )


def pod_issue(pods: Sequence[Obj]) -> PodIssue | None:
    """The first reason the pods do not serve, in the order a person fixes them."""
    finders = (_download_failure, _config_error, _image_pull, _crash_loop, _unschedulable)
    for finder in finders:
        issue = next((i for p in pods if (i := finder(p)) is not None), None)
        if issue is not None:
            return issue
    return None


def _download_failure(pod: Obj) -> PodIssue | None:
    status = _fetch_status(pod)
    if status is None or _fetch_state(status) != "failed":
        return None
    done = _terminated(status, "state") or _terminated(status, "lastState")
    code = done.get("exitCode")
    meaning = FETCH_EXIT_MEANINGS.get(code, "the download failed") if isinstance(code, int) else ""
    detail = f": {_quote(done.get('message'))}" if done.get("message") else ""
    return PodIssue(
        "Failed",
        "ModelDownloadFailed",
        f"downloading the model failed (exit code {code}: {meaning}){detail}",
    )


def _waiting(pod: Obj) -> Iterator[tuple[Obj, Obj]]:
    for key in ("initContainerStatuses", "containerStatuses"):
        for status in _statuses(pod, key):
            waiting = (status.get("state") or {}).get("waiting")
            if waiting:
                yield status, waiting


def _config_error(pod: Obj) -> PodIssue | None:
    # The kubelet's message names what is missing (a Secret, a ConfigMap, a key).
    for status, waiting in _waiting(pod):
        if waiting.get("reason") == "CreateContainerConfigError":
            return PodIssue(
                "Failed",
                "CreateContainerConfigError",
                f'container "{status.get("name")}" cannot start (CreateContainerConfigError): '
                f"{_quote(waiting.get('message'))}",
            )
    return None


def _image_pull(pod: Obj) -> PodIssue | None:
    for status, waiting in _waiting(pod):
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            return PodIssue(
                "Failed",
                str(waiting["reason"]),
                f'cannot pull image "{status.get("image", "?")}" for container '
                f'"{status.get("name")}" ({waiting["reason"]}): {_quote(waiting.get("message"))}',
            )
    return None


def _crash_loop(pod: Obj) -> PodIssue | None:
    for status, waiting in _waiting(pod):
        if waiting.get("reason") != "CrashLoopBackOff":
            continue
        if status.get("name") == names.FETCH_CONTAINER:
            continue  # a failing download is reported as such
        last = _terminated(status, "lastState")
        why = f", {last['reason']}" if last.get("reason") else ""
        detail = f": {_quote(last.get('message'))}" if last.get("message") else ""
        return PodIssue(
            "Failed",
            "CrashLoopBackOff",
            f'container "{status.get("name")}" is crash-looping (restarted '
            f"{status.get('restartCount', 0)} times; last exit code {last.get('exitCode')}{why})"
            f"{detail}",
        )
    return None


def _unschedulable(pod: Obj) -> PodIssue | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") != "PodScheduled" or cond.get("status") != "False":
            continue
        if cond.get("reason") != "Unschedulable":
            continue
        said = _quote(cond.get("message"))
        if "nvidia.com/gpu" in said:
            return PodIssue(
                "Pending",
                "InsufficientGPU",
                f"no node can take the pod's GPU request (nvidia.com/gpu); the scheduler says: "
                f"{said}",
            )
        return PodIssue("Pending", "Unschedulable", f"the pod cannot be scheduled: {said}")
    return None
