"""A webhook that does nothing: aiohttp over TLS, stdlib json, a fixed patch, asyncio's own loop.

This is the floor the admission path is compared with: what any Python webhook costs
before it looks at a single object.
"""
from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

from aiohttp import web

from webhook.admission.server import MAX_BODY
from webhook.process.loop import new_event_loop
from webhook.admission.tls import build_context as tls_context


def make_app(patch: bytes) -> web.Application:
    encoded = base64.b64encode(patch).decode("ascii")

    async def mutate(request: web.Request) -> web.Response:
        review = json.loads(await request.read())
        return web.json_response({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True, "patchType": "JSONPatch", "patch": encoded},
        })

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/mutate", mutate)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bare")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert-file", required=True)
    parser.add_argument("--tls-key-file", required=True)
    parser.add_argument("--patch-file", required=True, help="the JSON patch to answer with")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop instead of asyncio's loop")
    args = parser.parse_args()
    app = make_app(Path(args.patch_file).read_bytes())
    loop = new_event_loop() if args.uvloop else None
    web.run_app(app, host="127.0.0.1", port=args.port, ssl_context=tls_context(args.tls_cert_file, args.tls_key_file),
                print=None, access_log=None, loop=loop)


if __name__ == "__main__":
    main()
