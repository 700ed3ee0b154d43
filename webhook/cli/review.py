"""`review`: what the webhook would do to one pod, from a snapshot of the cluster (offline)."""
from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

from ..admission import review as reviews
from ..admission.admit import admit
from ..stores import documents
from ..stores.snapshot import SnapshotStore
from ..deadline import Deadline
from .parser import settings_from


def read_document(source: str, shown: str) -> dict[str, Any]:
    """The one object in `source` (a file, or - for stdin); ValueError naming it (`shown`) when it holds none."""
    found = documents.read(None if source == "-" else source, shown)
    if len(found) != 1:
        raise ValueError(f"{shown}: {len(found)} YAML documents; one is read (an AdmissionReview or a Pod)")
    if not isinstance(found[0], dict):
        kind = "a list" if isinstance(found[0], list) else f"a {type(found[0]).__name__}"
        raise ValueError(f"{shown}: {kind}, not an object; one is read (an AdmissionReview or a Pod)")
    if found[0].get("kind") == "List" or isinstance(found[0].get("items"), list):
        raise ValueError(f"{shown}: a List of {len(found[0].get('items') or [])} objects; one is read "
                         f"(an AdmissionReview or a Pod: kubectl get pod NAME -o yaml)")
    return found[0]


def snapshot(path: str) -> SnapshotStore:
    """The `--state` snapshot; a warning when it holds nothing the rules can read."""
    store = SnapshotStore.from_file(path)
    if not store.usable():
        print(f"warning: {path} holds no PVC, PV, Node, Pod or ShareManager: every disk will be unresolved",
              file=sys.stderr)
    return store


async def run_review(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    shown = "stdin" if args.request == "-" else args.request
    document = read_document(args.request, shown)
    if document.get("kind") == "Pod":  # a bare Pod manifest: in -n, else its own namespace
        meta = document.get("metadata", {})
        if not isinstance(meta, dict):
            raise ValueError(f"{shown}: the Pod metadata is a {type(meta).__name__}, not an object")
        for key in ("name", "generateName", "namespace"):
            if meta.get(key) is not None and not isinstance(meta[key], str):
                raise ValueError(f"{shown}: the Pod metadata.{key} is a {type(meta[key]).__name__}, not a string")
        if not isinstance(document.get("spec", {}), dict):
            raise ValueError(f"{shown}: the Pod spec is a {type(document['spec']).__name__}, not an object")
        if not (args.namespace or meta.get("namespace")):
            raise ValueError(f"{shown}: a bare Pod needs --namespace (or metadata.namespace)")
        request = reviews.AdmissionRequest.for_pod(document, args.namespace or meta["namespace"])
    else:
        try:
            request = reviews.parse_review(document)
        except reviews.BadReview as exc:
            raise ValueError(f"{shown}: {exc}") from None
    store = snapshot(args.state)
    outcome = await admit(request, store, settings, Deadline.after(settings.default_timeout, 0))
    envelope = reviews.build_response(request.uid, outcome)
    encoded = envelope["response"].get("patch")  # the JSON patch the apiserver would apply, in base64
    patch = json.loads(base64.b64decode(encoded)) if encoded else []
    print(json.dumps(patch if args.patch else envelope, indent=2))
    summary = outcome.decision.reason if outcome.decision else \
        f"untouched: {outcome.skipped}" + (f" ({outcome.detail})" if outcome.detail else "")
    print(f"# {summary}", file=sys.stderr)
    return 0
