"""Does our own MutatingWebhookConfiguration let opted-in pods through? Its matchConditions
name the opt-in annotation too (manifests/base), and when they name another key than
--opt-in-annotation no VM reaches the webhook at all, silently. So `serve` reads the
configuration at start and every `period` seconds, and says so in one log line and a /readyz
note (readiness itself stays OK: the webhook must never block anything).

The conditions are CEL; this reads them the way the shipped one is written: a webhook that
selects virt-launcher pods and has matchConditions must name the key, quoted, in one of them.
"""
from __future__ import annotations

import logging
from typing import Any

from .. import kinds
from ..background import Background, Companion
from ..stores.store import Store, StoreError
from ..kinds import MUTATING_WEBHOOK

log = logging.getLogger("webhook.optin")

DEFAULT_CONFIGURATION = "kubevirt-colocate"  # manifests/base/mutatingwebhookconfiguration.yaml


def shut_out(configuration: dict[str, Any], key: str) -> list[str]:
    """The webhooks of `configuration` for virt-launcher pods whose matchConditions do not
    name `key`: a pod annotated with it never reaches us through them."""
    found = []
    for hook in configuration.get("webhooks") or []:
        labels = ((hook.get("objectSelector") or {}).get("matchLabels")) or {}
        conditions = hook.get("matchConditions") or []
        if labels.get(kinds.VIRT_LAUNCHER[0]) != kinds.VIRT_LAUNCHER[1] or not conditions:
            continue
        expressions = [str(c.get("expression") or "") for c in conditions if isinstance(c, dict)]
        if not any(f"'{key}'" in e or f'"{key}"' in e for e in expressions):
            found.append(str(hook.get("name") or "?"))
    return found


class OptInCheck(Companion):
    """A companion of `serve` (start, stop, degraded): the note while the configuration shuts
    our opt-in key out."""

    def __init__(self, store: Store, key: str, name: str = DEFAULT_CONFIGURATION, *, period: float = 60.0,
                 timeout: float = 5.0):
        self.store, self.key, self.name, self.timeout = store, key, name, timeout
        self._note = ""
        self.task = Background("opt-in check", self.check, log=log, failure="checking the webhook configuration "
                               "failed", period=period)

    def degraded(self) -> list[str]:
        return ([self._note] if self._note else []) + super().degraded()

    async def check(self) -> str:
        """Read the configuration once; the note (empty when the key gets through or it cannot be told)."""
        try:
            configuration = await self.store.get(MUTATING_WEBHOOK, None, self.name, timeout=self.timeout)
        except StoreError:
            return self._note  # unknown: what was said stands
        hooks = shut_out(configuration or {}, self.key)
        note = (f"MutatingWebhookConfiguration {self.name}: the matchConditions of {', '.join(hooks)} do not "
                f"name --opt-in-annotation {self.key}: no opted-in pod reaches the webhook") if hooks else ""
        if note and note != self._note:
            log.warning("opt-in annotation shut out", extra={"fields": {
                "configuration": self.name, "webhooks": hooks, "opt_in_annotation": self.key}})
        self._note = note
        return note
