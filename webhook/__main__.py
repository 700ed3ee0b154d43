"""Command line: `serve`, `review` (offline dry-run) and `certs`."""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import yaml

from . import admission, logs, mutate, server
from .config import Settings
from .deadline import Deadline
from .cache import WatchedClusterStore
from .store import SnapshotStore

DEFAULT_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # the controller-runtime convention
log = logging.getLogger("webhook")


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("rules (each also COLOCATE_<NAME> in the environment)")
    group.add_argument("--opt-in-annotation", help="pod annotation that opts a VM in (default kubevirt-scheduler/co-schedule)")
    group.add_argument("--longhorn-namespace", help="namespace of Longhorn's share-managers (default longhorn-system)")
    group.add_argument("--csi-driver", help="CSI driver of Longhorn volumes (default driver.longhorn.io)")
    group.add_argument("--share-manager-rule", choices=["on", "off"], help="steer share-manager pods to their VM (default on)")


def settings_from(args: argparse.Namespace) -> Settings:
    rule = getattr(args, "share_manager_rule", None)
    return Settings.from_env(
        opt_in_annotation=getattr(args, "opt_in_annotation", None),
        longhorn_namespace=getattr(args, "longhorn_namespace", None),
        csi_driver=getattr(args, "csi_driver", None),
        share_manager_rule=None if rule is None else rule == "on",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubevirt-colocate", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)

    serve = verbs.add_parser("serve", help="run the admission webhook over HTTPS")
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--state", help="answer from this YAML snapshot instead of the cluster")
    source.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then KUBECONFIG)")
    serve.add_argument("--tls-cert-file", default=f"{DEFAULT_CERT_DIR}/tls.crt")
    serve.add_argument("--tls-key-file", default=f"{DEFAULT_CERT_DIR}/tls.key")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=9443)
    serve.add_argument("--log-level", default=None, help="debug, info, warning, error (env LOG_LEVEL)")
    add_settings_flags(serve)

    review = verbs.add_parser("review", help="dry-run: what would the webhook do to this pod?")
    review.add_argument("--state", required=True, help="YAML snapshot of the cluster (kubectl get -o yaml)")
    review.add_argument("request", nargs="?", default="-", help="AdmissionReview or Pod, JSON or YAML; - for stdin")
    review.add_argument("--namespace", "-n", default=None, help="namespace of a bare Pod manifest")
    add_settings_flags(review)

    make = verbs.add_parser("certs", help="generate a CA and a serving certificate for the Service")
    make.add_argument("--service", required=True)
    make.add_argument("--namespace", required=True)
    make.add_argument("--out", required=True, help="directory for ca.crt, tls.crt, tls.key")
    make.add_argument("--days", type=int, default=365)
    make.add_argument("--extra-san", action="append", default=[], help="another DNS name or IP (repeatable)")
    return parser


def read_document(source: str) -> Any:
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    return yaml.safe_load(text)  # JSON is YAML


async def run_review(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    document = read_document(args.request)
    if isinstance(document, dict) and document.get("kind") == "Pod":
        namespace = args.namespace or (document.get("metadata") or {}).get("namespace")
        if not namespace:
            print("error: a bare Pod needs --namespace (or metadata.namespace)", file=sys.stderr)
            return 2
        document = admission.review_for_pod(document, namespace)
    try:
        request = admission.parse_review(document)
    except admission.BadReview as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    store = SnapshotStore.from_file(args.state)
    outcome = await mutate.admit(request, store, settings, Deadline.after(settings.default_timeout, 0))
    print(json.dumps(outcome.response.envelope(), indent=2))
    summary = outcome.decision.reason if outcome.decision else f"untouched: {outcome.skipped}"
    print(f"# {summary}", file=sys.stderr)
    return 0


def run_serve(args: argparse.Namespace) -> int:
    import os

    from aiohttp import web

    logs.setup(args.log_level or os.environ.get("LOG_LEVEL", "info"))
    settings = settings_from(args)
    context = server.tls_context(args.tls_cert_file, args.tls_key_file)
    loop = server.new_event_loop()

    async def build() -> web.Application:
        if args.state:
            store: Any = SnapshotStore.from_file(args.state)
        else:
            store = await WatchedClusterStore.connect(args.kubeconfig, settings)
        app = server.make_app(store, settings)

        async def lifecycle(app: web.Application):
            # Caches fill in the background: the server listens at once and answers from GETs
            # until they have synced (readiness says when).
            if isinstance(store, WatchedClusterStore):
                store.start()
            log.info("serving", extra={"fields": {"host": args.host, "port": args.port,
                                                  "source": args.state or "cluster",
                                                  "loop": type(asyncio.get_running_loop()).__module__}})
            yield
            log.info("stopping")
            await store.close()

        app.cleanup_ctx.append(lifecycle)
        return app

    # run_app handles SIGTERM/SIGINT: stop listening, finish requests, then the cleanup above.
    web.run_app(build(), host=args.host, port=args.port, ssl_context=context, loop=loop,
                print=None, access_log=None)
    return 0


def run_certs(args: argparse.Namespace) -> int:
    from . import certs  # cryptography costs 8 MiB: only for this verb

    names = certs.service_names(args.service, args.namespace) + list(args.extra_san)
    out = certs.write(certs.generate(names, days=args.days), args.out)
    print(f"wrote {out}/ca.crt, {out}/tls.crt, {out}/tls.key for {', '.join(names)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.verb == "review":
            return asyncio.run(run_review(args))
        if args.verb == "serve":
            return run_serve(args)
        if args.verb == "certs":
            return run_certs(args)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
