"""Test hosts with real addresses: a network namespace per host, joined by a veth pair.

kube-apiserver refuses loopback addresses in an EndpointSlice (and longrun refuses them for
an InferenceHost), so a test host cannot live on 127.x. Each `NetworkHost` is a network
namespace (`ip netns`) with one veth pair: this machine's end gets `198.18.N.1/30`, the
namespace's end `198.18.N.2/30`, from the benchmarking range 198.18.0.0/15 (RFC 2544:
never routed on the internet), and the kernel routes between them, so a process started
in the namespace (`prefix`) is reached at `address` from here, by the controller and by
runner processes alike. Traffic goes only to those addresses: the namespace has no other
interface than its loopback and its veth end, and no route out.

Needs root (CAP_NET_ADMIN) and iproute2's `ip`; `unavailable()` says why not in one line.
`close()` removes the veth pair and the namespace (and so its addresses); processes in it
must be stopped first. Names carry this process's pid, so parallel test processes do not
collide, and a leftover of a killed process is removed by the next `NetworkHost` that
reuses its slot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

BASE = "198.18"  # 198.18.0.0/15: RFC 2544's benchmarking range


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2; Debian: apt-get install iproute2)"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_NET_ADMIN)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


@dataclass
class NetworkHost:
    """One network namespace reached at `address` (198.18.N.2) from this machine."""

    index: int

    def __post_init__(self) -> None:
        slot = (os.getpid() % 60 * 4 + self.index) % 250 + 1
        self.name = f"longrun-{os.getpid()}-{self.index}"
        self.device = f"lr{os.getpid() % 100000}h{self.index}"[:15]
        self.gateway = f"{BASE}.{slot}.1"
        self.address = f"{BASE}.{slot}.2"
        self.closed = False

    @property
    def prefix(self) -> tuple[str, ...]:
        """The command prefix that runs a process inside the namespace."""
        return ("ip", "netns", "exec", self.name)

    def open(self) -> NetworkHost:
        """Make the namespace, the veth pair, the addresses and the links up."""
        self._remove()  # a leftover of an earlier process with this pid
        _ip("netns", "add", self.name)
        inside = f"{self.device}n"[:15] if len(self.device) < 15 else self.device[:-1] + "n"
        try:
            _ip("link", "add", self.device, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", self.name)
            _ip("addr", "add", f"{self.gateway}/30", "dev", self.device)
            _ip("link", "set", self.device, "up")
            _ip("-n", self.name, "addr", "add", f"{self.address}/30", "dev", inside)
            _ip("-n", self.name, "link", "set", inside, "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
        except OSError:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Remove the veth pair and the namespace (safe to repeat)."""
        if not self.closed:
            self._remove()
            self.closed = True

    def _remove(self) -> None:
        _ip("link", "del", self.device, check=False)  # deletes both ends
        _ip("netns", "del", self.name, check=False)

    def __enter__(self) -> NetworkHost:
        return self.open()

    def __exit__(self, *_: object) -> None:
        self.close()
