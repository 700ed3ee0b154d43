"""`certs` (the serving certificate) and `spare-vms` (Longhorn's Setting): one-off changes."""
from __future__ import annotations

import argparse
import asyncio

from .parser import settings_from


def run_certs(args: argparse.Namespace) -> int:
    from ..tools import certs, kube_certs  # cryptography costs 8 MiB: only for this verb

    names = certs.service_names(args.service, args.namespace) + list(args.extra_san)
    if not args.out and not args.secret:
        raise ValueError("give --out or --secret: the private key has to go somewhere")
    if args.secret or args.patch_webhook:
        done = asyncio.run(kube_certs.run(names, namespace=args.namespace, days=args.days, secret=args.secret,
                                          webhook=args.patch_webhook, out=args.out, kubeconfig=args.kubeconfig,
                                          timeout=args.request_timeout))
        print("\n".join(done))
        return 0
    out = certs.write(certs.generate(names, days=args.days), args.out)
    print(f"wrote {out}/ca.crt, {out}/tls.crt, {out}/tls.key for {', '.join(names)}")
    return 0


def run_spare(args: argparse.Namespace) -> int:
    from ..keeper import spare

    print(asyncio.run(spare.run(namespace=settings_from(args).longhorn_namespace, spare=not args.undo,
                                kubeconfig=args.kubeconfig, context=args.context, timeout=args.request_timeout)))
    return 0
