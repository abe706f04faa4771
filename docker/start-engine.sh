#!/usr/bin/env bash
# Start a private Docker engine in the background, with everything it keeps under one folder,
# and wait (bounded) until it answers. For CI and for machines with no engine running:
#
#   eval "$(docker/start-engine.sh /tmp/engine)"     # sets DOCKER_HOST for this shell
#   docker/start-engine.sh --stop /tmp/engine        # stops it again
#
# The engine has no default bridge (--bridge=none), so it does not clash with another engine's:
# chains uses user-defined networks, on which containers reach each other by name, and
# publishes ports on 127.0.0.1 only.
# Needs root and dockerd (Debian: apt-get install -y docker.io).
set -euo pipefail

stop=0
if [[ ${1:-} == --stop ]]; then
    stop=1
    shift
fi
dir="${1:?usage: start-engine.sh [--stop] FOLDER}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
pidfile="$dir/dockerd.pid"
socket="$dir/docker.sock"

if [[ $stop == 1 ]]; then
    [[ -f $pidfile ]] || exit 0
    pid="$(cat "$pidfile")"
    kill "$pid" 2>/dev/null || exit 0
    # dockerd stops its containers (10 s each at most, in parallel) and its containerd first.
    for _ in $(seq 1 300); do
        kill -0 "$pid" 2>/dev/null || exit 0
        sleep 0.1
    done
    echo "dockerd ($pid) did not stop within 30 s; killing it" >&2
    kill -9 "$pid" 2>/dev/null || true
    exit 0
fi

command -v dockerd >/dev/null || { echo "dockerd is missing: apt-get install -y docker.io" >&2; exit 1; }
if [[ -S $socket ]] && DOCKER_HOST="unix://$socket" docker version >/dev/null 2>&1; then
    echo "export DOCKER_HOST=unix://$socket"
    exit 0
fi

# setsid: the engine outlives this script and is not hit by the terminal's signals.
setsid dockerd \
    --host "unix://$socket" \
    --data-root "$dir/data" \
    --exec-root "$dir/x" \
    --pidfile "$pidfile" \
    --bridge=none \
    >"$dir/dockerd.log" 2>&1 </dev/null &

for _ in $(seq 1 300); do  # 30 s at most
    if [[ -S $socket ]] && DOCKER_HOST="unix://$socket" docker version >/dev/null 2>&1; then
        echo "export DOCKER_HOST=unix://$socket"
        exit 0
    fi
    sleep 0.1
done
echo "dockerd did not answer within 30 s; the end of its log ($dir/dockerd.log):" >&2
tail -n 20 "$dir/dockerd.log" >&2
exit 1
