"""Command line: `serve`, `review` (offline dry-run), `explain` (a VM in the cluster), `status`
(every opted-in VM in the cluster) and `certs`."""
from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import yaml

from . import __version__, logs
from .admission import review as reviews
from .admission.admit import admit
from .admission.budget import DEFAULT_BYTES
from .cluster.client import NoCredentials
from .cluster.snapshot import SnapshotStore
from .cluster.store import StoreError
from .config import EXPLAIN, REVIEW, SERVE, SETTINGS, SPARE_VMS, STATUS, KeepMode, Settings, retired
from .deadline import Deadline

DEFAULT_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # the controller-runtime convention
log = logging.getLogger("webhook")


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line: `PROG: error: WHY (PROG --help lists the flags)`."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the flags)\n")


class ShowDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's default in its help: argparse's where the flag has one, else the help says it
    (flags that fall back on the environment default to None here and name their default themselves)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default" in text or action.required or action.default in (None, argparse.SUPPRESS, [], False):
            return text
        return super()._get_help_string(action)


def add_setting_flags(parser: argparse.ArgumentParser, verb: str) -> None:
    """The flags of `verb` that are settings (config.SETTINGS): the rules', then the keeper's."""
    for keeper, title in ((False, "rules"), (True, "the keeper")):
        flags = [(row, row.flag) for row in SETTINGS
                 if row.flag is not None and verb in row.flag.verbs and row.flag.keeper is keeper]
        if not flags:
            continue
        group = parser.add_argument_group(f"{title} (each also COLOCATE_<NAME> in the environment)")
        for row, flag in flags:
            group.add_argument(row.option, type=row.kind if row.kind in (int, float) else None, choices=row.choices,
                               metavar=flag.metavar, help=f"{flag.help} (default: {row.shown_default()})")


def flags_given(args: argparse.Namespace) -> dict[str, object]:
    """The settings this verb's flags set (`getattr`: each verb has only its own), on/off as a switch."""
    given: dict[str, object] = {}
    for row in SETTINGS:
        value = getattr(args, row.name, None)
        if value is not None:
            given[row.name] = row.parse(value) if row.kind is bool else value
    return given


def settings_from(args: argparse.Namespace) -> Settings:
    """Defaults, then COLOCATE_*, then the flags this verb has; a removed setting still in the
    environment is ignored with a warning."""
    for warning in retired(os.environ):
        log.warning(warning)
    return Settings.from_env(**flags_given(args))


def add_kubeconfig_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then KUBECONFIG, then ~/.kube/config)")


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", "-o", choices=["text", "json"], default="text", help="text for people, json for tools")


MIB = 1024 * 1024


def mebibytes(text: str) -> int:
    """A whole number of MiB, at least 4 (the largest review, 3 MiB, must fit)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of MiB: {text!r}") from None
    if value < 4:
        raise argparse.ArgumentTypeError(f"at least 4 MiB (the largest review is 3 MiB), not {value}")
    return value


def add_serve(serve: argparse.ArgumentParser) -> None:
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--state", help="answer from this YAML snapshot instead of the cluster (default: the cluster)")
    add_kubeconfig_flag(source)
    serve.add_argument("--tls-cert-file", default=f"{DEFAULT_CERT_DIR}/tls.crt",
                       help="serving certificate, reloaded when the file changes")
    serve.add_argument("--tls-key-file", default=f"{DEFAULT_CERT_DIR}/tls.key", help="its private key")
    serve.add_argument("--host", default="0.0.0.0", help="address of the HTTPS admission port")
    serve.add_argument("--port", type=int, default=9443, help="HTTPS admission port (POST /mutate)")
    serve.add_argument("--client-ca-file",
                       help="require client certificates signed by this CA: mutual TLS (default: none)")
    serve.add_argument("--metrics-host", default="0.0.0.0", help="address of the operations port")
    serve.add_argument("--metrics-port", type=int, default=8080, help="plain HTTP: /healthz, /readyz, /metrics")
    serve.add_argument("--webhook-configuration", default="kubevirt-colocate", metavar="NAME",
                       help="our MutatingWebhookConfiguration: checked to let --opt-in-annotation through")
    serve.add_argument("--drain-delay", type=float, default=5.0,
                       help="seconds to keep serving after SIGTERM while the endpoint is removed")
    serve.add_argument("--shutdown-timeout", type=float, default=20.0,
                       help="seconds to let in-flight requests finish after the drain")
    serve.add_argument("--body-budget", type=mebibytes, default=DEFAULT_BYTES // MIB, metavar="MIB",
                       help="MiB of request bodies held at once; beyond it a request waits, unread, within its "
                            "deadline (no connection is closed for being one too many) (default: %(default)s)")
    serve.add_argument("--events", choices=["on", "off"], default="on",
                       help="Kubernetes Events on the VMI about each decision (cluster mode)")
    serve.add_argument("--log-level", default=None,
                       help="debug, info, warning, error (default: LOG_LEVEL in the environment, else info)")
    # Not for clusters, hidden from --help: "allow" parses each review and allows it, nothing
    # decided, so a benchmark can tell what serving costs from what the rules add.
    serve.add_argument("--admission", choices=["rules", "allow"], default="rules", help=argparse.SUPPRESS)


def add_review(review: argparse.ArgumentParser) -> None:
    review.add_argument("--state", required=True, help="YAML snapshot of the cluster (kubectl get -o yaml; required)")
    review.add_argument("request", nargs="?", default="-", help="AdmissionReview or Pod, JSON or YAML; - for stdin")
    review.add_argument("--namespace", "-n", default=None,
                        help="namespace of a bare Pod manifest (default: the Pod's metadata.namespace)")
    review.add_argument("--patch", action="store_true",
                        help="print the JSON patch itself, decoded, instead of the AdmissionReview response "
                             "(default: the response)")


def add_certs(make: argparse.ArgumentParser) -> None:
    make.add_argument("--service", required=True, help="the webhook's Service (required)")
    make.add_argument("--namespace", required=True, help="its namespace (required)")
    make.add_argument("--out", help="directory for ca.crt, tls.crt, tls.key (default: none; optional with --secret)")
    make.add_argument("--days", type=int, default=365, help="validity of the serving certificate")
    make.add_argument("--extra-san", action="append", default=[],
                      help="another DNS name or IP, repeatable (default: none)")
    cluster = make.add_argument_group("in a cluster (in-cluster credentials, else --kubeconfig)")
    cluster.add_argument("--secret",
                         help="keep the pair in this Secret of --namespace: renew it only when due (default: none)")
    cluster.add_argument("--patch-webhook", metavar="NAME",
                         help="put the CA into this MutatingWebhookConfiguration's caBundle (default: none)")
    add_kubeconfig_flag(cluster)


def add_explain(why: argparse.ArgumentParser) -> None:
    why.add_argument("vm", metavar="NAMESPACE/VM", help="the VirtualMachine (or VirtualMachineInstance)")
    add_kubeconfig_flag(why)
    add_output_flag(why)


def add_status(state: argparse.ArgumentParser) -> None:
    state.add_argument("--drain", metavar="NODE",
                       help="also what draining NODE will do: each VM and NFS server on it, where it goes, the "
                            "migrations, the VMs Longhorn would reboot and those that cannot move (read only) "
                            "(default: none)")
    add_kubeconfig_flag(state)
    add_output_flag(state)


def add_spare(spare: argparse.ArgumentParser) -> None:
    spare.add_argument("--undo", action="store_true",
                       help="take kubevirt.io/VirtualMachineInstance out again (Longhorn deletes launcher pods again) "
                            "(default: add it)")
    add_kubeconfig_flag(spare)


VERBS = (  # each verb: its help, its own flags; then its settings' flags (add_setting_flags)
    (SERVE, "run the admission webhook over HTTPS", add_serve),
    (REVIEW, "dry-run: what would the webhook do to this pod?", add_review),
    (EXPLAIN, "where a VM's disks are served from, where it runs, what the webhook would do now", add_explain),
    (STATUS, "every running opted-in VM: where it runs, where its disks are served from, co-located or not, what "
             "the keeper will do next and why, and its last action", add_status),
    ("certs", "generate a CA and a serving certificate for the Service", add_certs),
    (SPARE_VMS, "put kubevirt.io/VirtualMachineInstance on Longhorn's "
                "blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly, beside the kinds there: a share-manager "
                "restart no longer reboots the VMs of its volume (docs/operations.md: its price)", add_spare),
)


def build_parser(prog: str = "kubevirt-colocate") -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description=__doc__, formatter_class=ShowDefaults)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=Parser)
    for name, text, add_flags in VERBS:
        verb = verbs.add_parser(name, help=text, description=text, formatter_class=ShowDefaults)
        verb.set_defaults(verb_parser=verb)  # a flag of another verb is this verb's usage error
        add_flags(verb)
        add_setting_flags(verb, name)
    return parser


def read_document(source: str) -> Any:
    """The one document in `source` (a file, or - for stdin); ValueError naming it when it is not YAML."""
    shown = "stdin" if source == "-" else source
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    try:
        return yaml.safe_load(text)  # JSON is YAML
    except yaml.YAMLError as exc:
        raise ValueError(f"{shown}: not YAML or JSON: {getattr(exc, 'problem', None) or exc}") from None


def snapshot(path: str) -> SnapshotStore:
    """The `--state` snapshot; a warning when it holds nothing the rules can read."""
    store = SnapshotStore.from_file(path)
    if not store.usable():
        print(f"warning: {path} holds no PVC, PV, Node, Pod or ShareManager: every disk will be unresolved",
              file=sys.stderr)
    return store


def malformed_pod(pod: dict[str, Any]) -> str | None:
    """What makes a bare Pod manifest unusable for `review`, or None."""
    meta = pod.get("metadata", {})
    if not isinstance(meta, dict):
        return f"metadata is a {type(meta).__name__}, not an object"
    for key in ("name", "generateName", "namespace"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            return f"metadata.{key} is a {type(meta[key]).__name__}, not a string"
    if not isinstance(pod.get("spec", {}), dict):
        return f"spec is a {type(pod['spec']).__name__}, not an object"
    return None


def decoded_patch(envelope: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch the apiserver would apply, out of its base64 in the response (none: [])."""
    encoded = envelope["response"].get("patch")
    return json.loads(base64.b64decode(encoded)) if encoded else []


async def run_review(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    document = read_document(args.request)
    shown = "stdin" if args.request == "-" else args.request
    if isinstance(document, dict) and document.get("kind") == "Pod":
        problem = malformed_pod(document)
        if problem is not None:
            print(f"error: {shown}: the Pod {problem}", file=sys.stderr)
            return 2
        namespace = args.namespace or document["metadata"].get("namespace")
        if not namespace:
            print("error: a bare Pod needs --namespace (or metadata.namespace)", file=sys.stderr)
            return 2
        request = reviews.AdmissionRequest.for_pod(document, namespace)
    else:
        try:
            request = reviews.parse_review(document)
        except reviews.BadReview as exc:
            print(f"error: {shown}: {exc}", file=sys.stderr)
            return 2
    store = snapshot(args.state)
    outcome = await admit(request, store, settings, Deadline.after(settings.default_timeout, 0))
    envelope = reviews.build_response(request.uid, outcome)
    print(json.dumps(decoded_patch(envelope) if args.patch else envelope, indent=2))
    summary = outcome.decision.reason if outcome.decision else \
        f"untouched: {outcome.skipped}" + (f" ({outcome.detail})" if outcome.detail else "")
    print(f"# {summary}", file=sys.stderr)
    return 0


def keeper_process(api: Any, args: argparse.Namespace, settings: Settings, log_level: str) -> Any:
    """The campaign for the Lease, and the keeper in a process of its own while it leads
    (keeper/process.py); ValueError without a Lease namespace."""
    from .cluster.events import identity
    from .keeper import lease
    from .keeper.pipe import Assignment
    from .keeper.process import KeeperProcess

    assignment = Assignment(settings, args.kubeconfig, events=args.events == "on", log_level=log_level)
    return KeeperProcess(api, assignment, namespace=lease.lease_namespace(settings), identity=identity())


async def run_serve(args: argparse.Namespace) -> int:
    import os

    from .admission.optin import OptInCheck
    from .admission.service import Listen, Service
    from .cluster.reporter import StrandedReporter
    from .admission.tls import ReloadingTLS
    from .cluster import client
    from .cluster.cache import WatchedClusterStore
    from .cluster.direct import ClusterStore
    from .cluster.events import NO_EVENTS, EventSink, Events
    from .cluster.heap import FreezeListed
    from .cluster.store import Store

    level = args.log_level or os.environ.get("LOG_LEVEL", "info")
    logs.setup(level)
    settings = settings_from(args)
    store: Store
    events: Events = NO_EVENTS
    companions: list[Any] = []
    if args.state:
        store = snapshot(args.state)
        if settings.keep is not KeepMode.OFF:
            # No cluster, no keeper: the settings (and the start line) say so, not what was asked.
            log.info("keeper off: answering from a snapshot", extra={"fields": {"keep": "off", "asked": settings.keep}})
            settings = dataclasses.replace(settings, keep=KeepMode.OFF)
    else:
        api = await client.connect(args.kubeconfig)
        store = WatchedClusterStore(api, settings)
        events = EventSink(api) if args.events == "on" else NO_EVENTS
        companions.append(FreezeListed(store.informers))  # full collections walk what came after (heap.py)
        companions.append(StrandedReporter(store, settings, events))
        companions.append(OptInCheck(ClusterStore(api), settings.opt_in_annotation, args.webhook_configuration))
        if settings.keep is not KeepMode.OFF:
            try:
                companions.append(keeper_process(api, args, settings, level))
            except ValueError:
                await api.close()
                raise
    # Follows the files as cert-manager or the kubelet replace them (see tls.py).
    reloader = ReloadingTLS(args.tls_cert_file, args.tls_key_file, client_ca_file=args.client_ca_file)
    listen = Listen(host=args.host, port=args.port, metrics_host=args.metrics_host, metrics_port=args.metrics_port,
                    drain_delay=args.drain_delay, shutdown_timeout=args.shutdown_timeout,
                    body_budget=args.body_budget * MIB)
    log.info("starting", extra={"fields": {"source": args.state or "cluster", "keeper": settings.keep,
                                           "settings": vars(settings)}})
    await Service(store, settings, listen, reloader, events, companions, decide=args.admission == "rules").run()
    return 0


async def run_explain(args: argparse.Namespace) -> int:
    from .cluster import client
    from .cluster.direct import ClusterStore
    from .tools import explain

    namespace, _, name = args.vm.partition("/")
    if not namespace or not name:
        print("error: name the VM as NAMESPACE/VM", file=sys.stderr)
        return 2
    settings = settings_from(args)
    store = ClusterStore(await client.connect(args.kubeconfig))
    try:
        report = await explain.explain(store, settings, namespace, name, Deadline.after(settings.default_timeout, 0))
    except LookupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except StoreError as exc:
        print(f"error: cannot read the cluster: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    print(json.dumps(report, indent=2) if args.output == "json" else explain.render(report))
    return 0


async def run_status(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from .cluster import client
    from .cluster.direct import ClusterStore
    from .tools import status

    given = settings_from(args)
    api = await client.connect(args.kubeconfig)
    store = ClusterStore(api)
    try:
        # The keeper as deployed, unless this command was told otherwise: its flags win.
        deployed, source = await status.deployed_settings(store, given, timeout=given.default_timeout)
        explicit = flags_given(args)
        settings = dataclasses.replace(deployed, **explicit)
        report = await status.status(store, settings, datetime.now(UTC), timeout=settings.default_timeout, api=api,
                                     settings_from=source + (" and the flags given here" if explicit else ""))
    except StoreError as exc:
        print(f"error: cannot read the cluster: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    if args.output == "json":
        print(json.dumps(report.to_json() | ({"drain": report.drain(args.drain).to_json()} if args.drain else {}),
                         indent=2))
    else:
        print(status.render(report) + ("\n" + "\n".join(report.drain(args.drain).lines()) if args.drain else ""))
    return 0


def run_certs(args: argparse.Namespace) -> int:
    from .tools import certs, kube_certs  # cryptography costs 8 MiB: only for this verb

    names = certs.service_names(args.service, args.namespace) + list(args.extra_san)
    if not args.out and not args.secret:
        print("error: give --out or --secret: the private key has to go somewhere", file=sys.stderr)
        return 2
    if args.secret or args.patch_webhook:
        try:
            done = asyncio.run(kube_certs.run(names, namespace=args.namespace, days=args.days, secret=args.secret,
                                              webhook=args.patch_webhook, out=args.out, kubeconfig=args.kubeconfig))
        except kube_certs.KubeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print("\n".join(done))
        return 0
    out = certs.write(certs.generate(names, days=args.days), args.out)
    print(f"wrote {out}/ca.crt, {out}/tls.crt, {out}/tls.key for {', '.join(names)}")
    return 0


def run_spare(args: argparse.Namespace) -> int:
    from .cluster import spare

    try:
        said = asyncio.run(spare.run(namespace=settings_from(args).longhorn_namespace, spare=not args.undo,
                                     kubeconfig=args.kubeconfig))
    except spare.KubeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(said)
    return 0


def plugin() -> int:
    """`kubectl colocate ...`: kubectl runs `kubectl-colocate` from PATH with the rest of its arguments."""
    return main(prog="kubectl colocate")


def main(argv: list[str] | None = None, prog: str = "kubevirt-colocate") -> int:
    args, unknown = build_parser(prog).parse_known_args(argv)
    if unknown:
        args.verb_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if args.verb == "review":
            return asyncio.run(run_review(args))
        if args.verb == "serve":
            # uvloop when installed (asyncio.Runner's loop_factory; uvloop.install() is deprecated).
            from .admission.server import new_event_loop

            with asyncio.Runner(loop_factory=new_event_loop) as runner:
                return runner.run(run_serve(args))
        if args.verb == "explain":
            return asyncio.run(run_explain(args))
        if args.verb == "status":
            return asyncio.run(run_status(args))
        if args.verb == "certs":
            return run_certs(args)
        if args.verb == SPARE_VMS:
            return run_spare(args)
    except NoCredentials as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
