#!/bin/sh
# Start the webhook on the example snapshot, POST one AdmissionReview over HTTPS, show the decision
# and the webhook's log line about it (examples/demo.py).
set -eu
: "${PY:=.venv/bin/python}" "${CERTS:=certs/dev}" "${PORT:=9443}"
exec "$PY" examples/demo.py --certs "$CERTS" --port "$PORT"
