#!/usr/bin/env bash
# The README's demo: push the streaming chain as local processes, call it (the text
# arrives token by token as it is generated), and stop it, whatever happens in between.
set -euo pipefail
CHAINS=${CHAINS:-chains}
ARGS='{"prompt": "chains streams every token as soon as it is made", "max_tokens": 9}'

trap '"$CHAINS" stop streaming >/dev/null 2>&1 || true' EXIT

run() {
    echo "\$ chains $*" | sed "s|--json {.*}|--json '$ARGS'|"
    "$CHAINS" "$@"
    echo
}

run push examples/streaming/chain.py
run call streaming --json "$ARGS"
run stop streaming
trap - EXIT
