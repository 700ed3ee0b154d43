"""`make demo`: serve the example snapshot, POST one AdmissionReview over HTTPS, print the decision
and then the webhook's log (its admission line among it). When the webhook cannot start (the port
taken, a certificate missing) its own error is shown, at once."""
import argparse
import base64
import json
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

parser = argparse.ArgumentParser()
parser.add_argument("--certs", required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--review", default="examples/admission-review.json")
args = parser.parse_args()

log = tempfile.TemporaryFile(mode="w+")
server = subprocess.Popen(
    [sys.executable, "-m", "webhook", "serve", "--state", "examples/cluster.yaml", "--host", "127.0.0.1",
     "--port", str(args.port), "--metrics-host", "127.0.0.1", "--metrics-port", "0", "--drain-delay", "0",
     "--tls-cert-file", f"{args.certs}/tls.crt", "--tls-key-file", f"{args.certs}/tls.key"], stderr=log)


def webhook_log() -> str:
    log.seek(0)
    return log.read()


def answer(url: str) -> dict:
    """The webhook's answer, once it says it is serving (10 s at most); its own error if it exits
    first. Nothing is sent before: on a port another program holds, the review would wait on it."""
    body = open(args.review, "rb").read()
    context = ssl.create_default_context(cafile=f"{args.certs}/ca.crt")
    for _ in range(100):
        if server.poll() is not None:
            said = webhook_log().strip().splitlines() or [f"exit status {server.returncode}"]
            sys.exit(f"the webhook did not start: {said[-1]}\n(another port: make demo PORT=9444)")
        if '"msg":"serving"' not in webhook_log():
            time.sleep(0.1)
            continue
        try:
            request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, context=context, timeout=10) as response:
                return json.load(response)
        except (ConnectionError, urllib.error.URLError):
            time.sleep(0.1)
    sys.exit(f"no answer from {url} in 10 s; the webhook's log:\n{webhook_log()}")


try:
    response = answer(f"https://localhost:{args.port}/mutate?timeout=10s")["response"]
    print(f"allowed: {response['allowed']}")
    ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    for op in ops:
        print(f"  {op['op']} {op['path']} = {json.dumps(op['value'])}")
    decided = {op["path"].rsplit("~1", 1)[-1]: op["value"] for op in ops if "kubevirt-scheduler" in op["path"]}
    print(f"decision: {decided.get('decision', 'untouched')} {decided.get('node', '')} ({decided.get('reason', '')})")
    for warning in response.get("warnings", []):
        print(f"warning: {warning}")
    # The admission line is written once the answer is sent: wait for it, 5 s at most.
    for _ in range(50):
        if '"msg":"admission"' in webhook_log():
            break
        time.sleep(0.1)
    print("--- webhook log", flush=True)
    print(webhook_log(), end="")
    if '"msg":"admission"' not in webhook_log():
        sys.exit("no admission line in the webhook log")
finally:
    server.terminate()
    server.wait(timeout=30)
