"""POST an AdmissionReview to the webhook and print the decision it made (used by `make demo`)."""
import argparse
import base64
import json
import ssl
import sys
import time
import urllib.request

parser = argparse.ArgumentParser()
parser.add_argument("review")
parser.add_argument("--url", required=True)
parser.add_argument("--ca", required=True)
args = parser.parse_args()

body = open(args.review, "rb").read()
context = ssl.create_default_context(cafile=args.ca)
for attempt in range(50):  # wait up to 10 s for the server to listen
    try:
        request = urllib.request.Request(args.url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            envelope = json.load(response)
        break
    except (ConnectionError, urllib.error.URLError):
        time.sleep(0.2)
else:
    sys.exit(f"no answer from {args.url}")

answer = envelope["response"]
print(f"allowed: {answer['allowed']}")
ops = json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []
for op in ops:
    print(f"  {op['op']} {op['path']} = {json.dumps(op['value'])}")
decided = {op["path"].rsplit("~1", 1)[-1]: op["value"] for op in ops if "kubevirt-scheduler" in op["path"]}
print(f"decision: {decided.get('decision', 'untouched')} {decided.get('node', '')} ({decided.get('reason', '')})")
for warning in answer.get("warnings", []):
    print(f"warning: {warning}")
