"""The command line's flags: each verb's own, then its settings' (config.SETTINGS), each with its
default in its help."""
from __future__ import annotations

import argparse
import logging
import os
from typing import Any, NoReturn

from .. import __version__
from ..config import (BODY_BUDGET_MIB, EXPLAIN, KEEP, KEEPER_SETTINGS, REVIEW, SERVE, SETTINGS, SPARE_VMS, STATUS,
                      AdmissionSettings, KeeperSettings, Seconds, Settings, SharedSettings, duration_text, retired)
from .values import LOG_LEVELS, days, delay, host, label, level, mebibytes, port, san, timeout

DEFAULT_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # the controller-runtime convention
MIB = 1024 * 1024
DESCRIPTION = ("kubevirt-colocate: `serve` (the admission webhook), `keep` (the keeper), `review` (offline dry-run), "
               "`explain` (a VM in the cluster), `status` (every opted-in VM in the cluster), `certs` and `spare-vms`.")


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line: `PROG: error: WHY (PROG --help lists the flags)`;
    and the flags it takes and its verbs listed (`flags`, `verbs`: argparse keeps its own lists
    private), for completion (completion.py) and the tests that try every flag of every verb."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.flags: list[argparse.Action] = []
        self.verbs: dict[str, Parser] = {}
        super().__init__(*args, **kwargs)

    def add_argument(self, *names: str, **options: Any) -> argparse.Action:
        action = super().add_argument(*names, **options)
        self.flags.append(action)
        return action

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the flags)\n")


class Group:
    """An argument group (or a mutually exclusive one) whose flags its parser lists too."""

    def __init__(self, parser: Parser, title: str | None = None, *, exclusive: bool = False):
        self.group = parser.add_mutually_exclusive_group() if exclusive else parser.add_argument_group(title)
        self.flags = parser.flags

    def add_argument(self, *names: str, **options: Any) -> argparse.Action:
        action = self.group.add_argument(*names, **options)
        self.flags.append(action)
        return action


Flags = Parser | Group  # a parser or one of its argument groups


def flag(where: Flags, *names: str, **options: Any) -> None:
    """`where.add_argument`, with the flag's default in its help unless the help says it or there
    is none (a flag that falls back on the environment defaults to None and names it in its help)."""
    text, default = options.get("help"), options.get("default")
    if (text and text != argparse.SUPPRESS and "(default" not in text and not options.get("required")
            and default not in (None, [], False)):
        options["help"] = f"{text} (default: %(default)s)"
    where.add_argument(*names, **options)


# What a setting's flag is read as, by its type (the others: a closed choice or a string).
SETTING_TYPES: dict[type, Any] = {int: int, float: float, Seconds: delay}


def add_setting_flags(parser: Parser, verb: str) -> None:
    """The flags of `verb` that are settings (config.SETTINGS): the rules', then the keeper's."""
    for keeper, title in ((False, "rules"), (True, "the keeper")):
        flags = [row for row in SETTINGS if verb in row.verbs and (row in KEEPER_SETTINGS) is keeper]
        if not flags:
            continue
        where = Group(parser, f"{title} (each also COLOCATE_<NAME> in the environment)")
        for row in flags:
            # `status` reads the keeper's settings from its Deployment: a flag given here wins over them.
            default = f"the keeper Deployment's, else {row.shown_default()}" if keeper and verb == STATUS \
                else row.shown_default()
            where.add_argument(row.option, type=SETTING_TYPES.get(row.kind), choices=row.choices,
                               metavar=row.metavar, help=f"{row.help} (default: {default})")


def flags_given(args: argparse.Namespace) -> dict[str, object]:
    """The settings this verb's flags set (`getattr`: each verb has only its own), on/off as a switch."""
    return {row.name: row.parse(value) if row.kind is bool else value for row in SETTINGS
            if (value := getattr(args, row.name, None)) is not None}


# The settings each verb runs with: `serve` admission's, `keep` the keeper's, the tools both
# (they judge as both roles do); each reads only its own part's COLOCATE_* variables.
PART: dict[str, type[SharedSettings]] = {SERVE: AdmissionSettings, KEEP: KeeperSettings}


def settings_from(args: argparse.Namespace) -> Any:
    """Defaults, then COLOCATE_*, then this verb's flags; a removed setting in the environment is warned of."""
    for warning in retired(os.environ):
        logging.getLogger("webhook").warning(warning)
    part = PART.get(args.verb, Settings)
    given = {name: part.checked(name, value, f"--{name.replace('_', '-')} {value}")
             for name, value in flags_given(args).items()}
    return part.from_env(verb=args.verb, **given)


def add_kubeconfig_flag(parser: Flags) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then KUBECONFIG, then ~/.kube/config)")


def add_output_flag(parser: Flags) -> None:
    flag(parser, "--output", "-o", choices=["text", "json", "yaml"], default="text",
         help="text for people, json or yaml for tools")


def add_cluster_flags(parser: Parser, namespace: str | None, waits: str = "10s") -> None:
    """kubectl's flags, as a kubectl plugin takes them (`kubectl colocate status --context prod`); -n's help."""
    cluster = Group(parser, "the cluster, as kubectl's flags name it")
    add_kubeconfig_flag(cluster)
    cluster.add_argument("--context", help="the kubeconfig context to use (default: its current-context); "
                                           "in-cluster credentials are not tried")
    add_timeout_flag(cluster, waits)
    if namespace:
        cluster.add_argument("-n", "--namespace", type=label, help=namespace)


def add_timeout_flag(parser: Flags, default: str) -> None:
    parser.add_argument("--request-timeout", type=timeout, metavar="DURATION",
                        help=f"the time to wait for each of the cluster's answers, as kubectl's: 30s, 2m, or seconds "
                             f"(default: {default})")


def add_ops_flags(parser: Flags, metrics_port: int) -> None:
    """The plain-HTTP operations port and the log level, as `serve` and `keep` both have them."""
    flag(parser, "--metrics-host", type=host, default="0.0.0.0", help="address of the operations port")
    flag(parser, "--metrics-port", type=port, default=metrics_port, help="plain HTTP: /healthz, /readyz, /metrics")
    flag(parser, "--events", choices=["on", "off"], default="on",
         help="Kubernetes Events on the VMI about each decision (cluster mode)")
    parser.add_argument("--log-level", type=level, choices=LOG_LEVELS, default=None,
                        help="{%(choices)s}, in either case (default: LOG_LEVEL in the environment, else info)")


class KeeperFlag(argparse.Action):
    """A flag of the keeper's given to `serve`, as an older release took them (the README's patch
    once set `--keep=report` there): refused in one line, so that the webhook's rollout stops with
    the old replicas serving, and never ignored (docs/operations.md, Upgrading)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        option = option_string or ""
        parser.error(f"{option}={values} is the keeper's setting ({option.lstrip('-')}), not serve's: set it on the "
                     f"Deployment kubevirt-colocate-keeper (docs/operations.md, Upgrading)")


def add_serve(serve: Parser) -> None:
    source = Group(serve, exclusive=True)
    source.add_argument("--state", help="answer from this YAML snapshot instead of the cluster (default: the cluster)")
    add_kubeconfig_flag(source)
    flag(serve, "--tls-cert-file", default=f"{DEFAULT_CERT_DIR}/tls.crt",
         help="serving certificate, reloaded when the file changes")
    flag(serve, "--tls-key-file", default=f"{DEFAULT_CERT_DIR}/tls.key", help="its private key")
    flag(serve, "--host", type=host, default="0.0.0.0", help="address of the HTTPS admission port")
    flag(serve, "--port", type=port, default=9443, help="HTTPS admission port (POST /mutate)")
    serve.add_argument("--client-ca-file",
                       help="require client certificates signed by this CA: mutual TLS (default: none)")
    add_ops_flags(serve, 8080)
    flag(serve, "--webhook-configuration", default="kubevirt-colocate", metavar="NAME",
         help="our MutatingWebhookConfiguration: checked to let --opt-in-annotation through")
    flag(serve, "--drain-delay", type=delay, default=5.0, metavar="DURATION",
         help=f"how long to keep serving after SIGTERM while the endpoint is removed (default: {duration_text(5)})")
    flag(serve, "--shutdown-timeout", type=delay, default=20.0, metavar="DURATION",
         help=f"how long to let in-flight requests finish after the drain (default: {duration_text(20)})")
    flag(serve, "--body-budget", type=mebibytes, default=BODY_BUDGET_MIB, metavar="MIB",
         help="MiB of request bodies held at once; beyond it a request waits, unread, within its "
              "deadline (no connection is closed for being one too many)")
    for row in KEEPER_SETTINGS:
        serve.add_argument(row.option, action=KeeperFlag, dest=f"keeper_{row.name}", help=argparse.SUPPRESS)


def add_keep(keep: Parser) -> None:
    add_kubeconfig_flag(keep)
    add_ops_flags(keep, 8081)


def add_review(review: Parser) -> None:
    review.add_argument("--state", required=True, help="YAML snapshot of the cluster (kubectl get -o yaml; required)")
    flag(review, "request", nargs="?", default="-", help="AdmissionReview or Pod, JSON or YAML; - for stdin")
    review.add_argument("--namespace", "-n", default=None,
                        help="namespace of a bare Pod manifest (default: the Pod's metadata.namespace)")
    review.add_argument("--patch", action="store_true",
                        help="print the JSON patch itself, decoded, instead of the AdmissionReview response "
                             "(default: the response)")


def add_certs(make: Parser) -> None:
    make.add_argument("--service", required=True, type=label, help="the webhook's Service (required)")
    make.add_argument("--namespace", required=True, type=label, help="its namespace (required)")
    make.add_argument("--out", help="directory for ca.crt, tls.crt, tls.key (default: none; optional with --secret)")
    flag(make, "--days", type=days, default=365, help="validity of the serving certificate, in days (at least 1)")
    make.add_argument("--extra-san", action="append", default=[], type=san, metavar="NAME",
                      help="another DNS name or IP address, repeatable (default: none)")
    cluster = Group(make, "in a cluster (in-cluster credentials, else --kubeconfig)")
    cluster.add_argument("--secret",
                         help="keep the pair in this Secret of --namespace: renew it only when due (default: none)")
    cluster.add_argument("--patch-webhook", metavar="NAME",
                         help="put the CA into this MutatingWebhookConfiguration's caBundle (default: none)")
    add_kubeconfig_flag(cluster)
    add_timeout_flag(cluster, "30s")


def add_explain(why: Parser) -> None:
    why.add_argument("vm", metavar="[NAMESPACE/]VM",
                     help="the VirtualMachine (or VirtualMachineInstance), as NAMESPACE/VM or VM with -n NAMESPACE")
    add_cluster_flags(why, "the VM's namespace, when the VM is not given as NAMESPACE/VM (default: the context's "
                           "namespace, else default)")
    add_output_flag(why)


def add_status(state: Parser) -> None:
    state.add_argument("--drain", metavar="NODE",
                       help="also what draining NODE will do: each VM and NFS server on it, where it goes, the "
                            "migrations, the VMs Longhorn would reboot and those that cannot move (read only) "
                            "(default: none)")
    add_cluster_flags(state, "only the VMs of this namespace (default: every namespace); the keeper still decides "
                             "over all of them")
    add_output_flag(state)


def add_spare(spare: Parser) -> None:
    spare.add_argument("--undo", action="store_true",
                       help="take kubevirt.io/VirtualMachineInstance out again (Longhorn deletes launcher pods again) "
                            "(default: add it)")
    add_cluster_flags(spare, None, waits="30s")


VERBS = (  # each verb: its help, its own flags; then its settings' flags (add_setting_flags)
    (SERVE, "run the admission webhook over HTTPS", add_serve),
    (KEEP, "run the keeper: leader-elected through its Lease, it moves VMs back next to their storage", add_keep),
    (REVIEW, "dry-run: what would the webhook do to this pod?", add_review),
    (EXPLAIN, "where a VM's disks are served from, where it runs, what the webhook would do now", add_explain),
    (STATUS, "every running opted-in VM: where it runs, where its disks are served from, co-located or not, what "
             "the keeper will do next and why, and its last action", add_status),
    ("certs", "generate a CA and a serving certificate for the Service", add_certs),
    (SPARE_VMS, "put kubevirt.io/VirtualMachineInstance on Longhorn's "
                "blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly, beside the kinds there: a share-manager "
                "restart no longer reboots the VMs of its volume (docs/operations.md: its price)", add_spare),
)


def build_parser(prog: str = "kubevirt-colocate") -> Parser:
    parser = Parser(prog=prog, description=DESCRIPTION)
    parser.add_argument("--version", "-V", action="version", version=f"%(prog)s {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=Parser)
    for name, text, add_flags in VERBS:
        verb = verbs.add_parser(name, help=text, description=text)
        parser.verbs[name] = verb
        verb.set_defaults(verb_parser=verb)  # a flag of another verb is this verb's usage error
        add_flags(verb)
        add_setting_flags(verb, name)
    return parser
