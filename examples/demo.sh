#!/bin/sh
# Start the webhook on the example snapshot, POST one AdmissionReview over HTTPS, show the decision
# and the webhook's log line about it.
set -eu
: "${PY:=.venv/bin/python}" "${CERTS:=certs/dev}" "${PORT:=9443}"
log=$(mktemp)
"$PY" -m webhook serve --state examples/cluster.yaml --host 127.0.0.1 --port "$PORT" \
    --metrics-host 127.0.0.1 --metrics-port 0 --drain-delay 0 \
    --tls-cert-file "$CERTS/tls.crt" --tls-key-file "$CERTS/tls.key" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
"$PY" examples/send.py --ca "$CERTS/ca.crt" --url "https://localhost:$PORT/mutate?timeout=10s" \
    examples/admission-review.json
# The admission line is written once the answer is sent: wait for it, 5 s at most.
tries=0
until grep -q '"msg":"admission"' "$log" || [ "$tries" -ge 50 ]; do
    sleep 0.1
    tries=$((tries + 1))
done
echo "--- webhook log"
cat "$log"
grep -q '"msg":"admission"' "$log" || { echo "no admission line in the webhook log" >&2; exit 1; }
