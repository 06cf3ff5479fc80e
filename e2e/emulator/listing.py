"""List semantics: selectors, pagination with continue tokens, resourceVersion rules.

Lists are served from the latest state (the emulator keeps no snapshots), sorted
like etcd keys; continue tokens carry the list's resourceVersion so an expired
token answers 410 Gone as the real server's does after compaction.
"""

from __future__ import annotations

import base64
import json

from .errors import ApiError, bad_request, gone
from .registry import ResourceType
from .selectors import match_labels, parse_field_selector, parse_label_selector
from .store import Obj, Store


class ListingMixin:
    """The list verb of Api."""

    store: Store

    def present(self, rt: ResourceType, obj: Obj) -> Obj:
        raise NotImplementedError

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> Obj:
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, allowed=self.field_labels(rt))
        items, rv = self.store.snapshot(rt.key, namespace if rt.namespaced else None)
        self._check_list_rv(rv, resource_version, resource_version_match)
        start, rv = self._decode_continue(continue_token, rv)
        out: list[Obj] = []
        remaining = 0
        next_key = ""
        for obj in items:
            meta = obj["metadata"]
            key = f"{meta.get('namespace', '')}/{meta['name']}"
            if start and key <= start:
                continue
            if not match_labels(labels, meta.get("labels")) or not fields(obj):
                continue
            if limit and len(out) >= limit:
                remaining += 1
                continue
            out.append(self._list_item(rt, obj))
            next_key = key
        list_meta: Obj = {"resourceVersion": str(rv)}
        if remaining:
            token = json.dumps({"rv": rv, "start": next_key}).encode()
            list_meta["continue"] = base64.urlsafe_b64encode(token).decode()
            list_meta["remainingItemCount"] = remaining
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version,
            "metadata": list_meta,
            "items": out,
        }

    def _list_item(self, rt: ResourceType, obj: Obj) -> Obj:
        if rt.is_custom:
            return self.present(rt, obj)
        # Built-in list items carry no TypeMeta on a real server.
        return {k: v for k, v in self.present(rt, obj).items() if k not in ("apiVersion", "kind")}

    def field_labels(self, rt: ResourceType) -> tuple[str, ...]:
        base = ("metadata.name", "metadata.namespace") if rt.namespaced else ("metadata.name",)
        return base + rt.field_labels

    def _check_list_rv(self, current: int, rv: str | None, match: str | None) -> None:
        # The emulator keeps no old snapshots: an exact read of the past is always "expired".
        if match == "Exact" and rv and int(rv) < current:
            raise gone(f"too old resource version: {rv} ({current})")
        if rv and rv != "0" and int(rv) > current:
            raise ApiError(
                504,
                f"Too large resource version: {rv}, current resource version: {current}",
                reason="Timeout",
                details={
                    "causes": [
                        {
                            "reason": "ResourceVersionTooLarge",
                            "message": "Too large resource version",
                        }
                    ],
                    "retryAfterSeconds": 1,
                },
            )

    def _decode_continue(self, token: str | None, rv: int) -> tuple[str, int]:
        if not token:
            return "", rv
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            start, token_rv = str(data["start"]), int(data["rv"])
        except (ValueError, KeyError, TypeError):
            raise bad_request(
                "continue key is not valid: incorrect encoded start resourceVersion"
            ) from None
        if token_rv < self.store.compacted_rv:
            raise gone(
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter."
            )
        return start, token_rv
