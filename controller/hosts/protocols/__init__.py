"""The admin protocols, by name: the built-ins and plug-ins from the entry point group
`longrun.host_protocols` (`name = "package.module:Class"`, a class implementing
`base.AdminProtocol`; name it `<domain>/<name>`). Imported once, at start-up; a plug-in that
fails to import is logged and left out (its hosts then report ProtocolUnknown)."""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import entry_points

from controller.hosts.protocols.base import AdminProtocol

log = logging.getLogger(__name__)
GROUP = "longrun.host_protocols"
BUILTIN = {
    "openai": "controller.hosts.protocols.openai:OpenAIProtocol",
    "ollama": "controller.hosts.protocols.ollama:OllamaProtocol",
    "inferenced": "controller.hosts.protocols.inferenced:InferencedProtocol",
}


def _load(target: str) -> AdminProtocol:
    module, _, attribute = target.partition(":")
    protocol: AdminProtocol = getattr(importlib.import_module(module), attribute)()
    return protocol


def installed() -> dict[str, AdminProtocol]:
    """Every admin protocol, built-ins first; a plug-in may not replace a built-in."""
    found = {name: _load(target) for name, target in BUILTIN.items()}
    for entry in entry_points(group=GROUP):
        if entry.name in found:
            log.warning("admin protocol plug-in %s ignored: the name is taken", entry.name)
            continue
        try:
            found[entry.name] = entry.load()()
        except Exception as exc:  # a broken plug-in must not stop the controller
            log.warning("admin protocol plug-in %s failed to load: %s", entry.name, exc)
    return found


__all__ = ["BUILTIN", "GROUP", "AdminProtocol", "installed"]
