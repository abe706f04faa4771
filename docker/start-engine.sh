#!/usr/bin/env bash
# Start a private Docker engine in the background, with everything it keeps under one folder,
# and wait (bounded) until it answers. For CI and for machines with no engine running:
#
#   eval "$(docker/start-engine.sh /tmp/engine)"     # sets DOCKER_HOST for this shell
#   docker/start-engine.sh --stop /tmp/engine        # stops it and removes the folder
#
# --stop leaves nothing behind: once dockerd has stopped, every mount under the folder is
# undone (the engine leaves its network namespace mounted there after any container ran with
# --network host, and then the folder cannot be removed), and the folder, with its images, is
# removed. The firewall is put back too: the engine adds its chains (DOCKER, DOCKER-USER, ...),
# their jumps and rules for each of its networks' bridges, turns forwarding on (FORWARD's
# policy to DROP when it was off), and leaves all of it when it stops. `start` writes down the
# filter and nat tables and forwarding as they were (FOLDER/netfilter.before); `--stop`
# deletes the new rules of this engine's bridges and jumps and, when no other dockerd runs in
# this network namespace (they share the chains, the policy and forwarding), every new Docker
# chain and rule, and puts policies and forwarding back. When any of that fails it says what
# is left and exits non-zero. It only removes a folder that holds an engine's files
# (dockerd.log or x/), and only signals the dockerd started with this folder's pid file and
# the containerd, shims and containers of this folder.
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

# Mount points at or under folder $1, deepest first. /proc/self/mountinfo escapes blanks and
# backslashes in octal (\040), which printf %b decodes once given as \0040.
mounts_under() {
    local raw path
    while read -r _ _ _ _ raw _; do
        path="$(printf '%b' "${raw//\\/\\0}")"
        if [[ $path == "$1" || $path == "$1"/* ]]; then
            printf '%s\t%s\n' "$(tr -cd / <<<"$path" | wc -c)" "$path"
        fi
    done </proc/self/mountinfo | sort -rn -k1,1 | cut -f2-
}

# Pids of the processes of folder $1's engine that outlive a killed dockerd: its containerd
# and the shims, whose command lines name the containerd folder under the exec root.
engine_processes() {
    local path
    # The pattern comes from a file, so that grep's own command line does not match it.
    for path in $(grep -lasF -f <(printf '%s\n' "$1/x/containerd/") /proc/[0-9]*/cmdline || true); do
        path="${path#/proc/}"
        echo "${path%/cmdline}"
    done
    return 0
}

# Whether pid $1 is the dockerd that pid file $2 belongs to (a pid may have been reused).
is_engine() {
    { tr '\0' '\n' <"/proc/$1/cmdline"; } 2>/dev/null | grep -qxF -- "$2"
}

start_time() {  # of pid $1, in clock ticks since boot (field 22 of its stat; after the name)
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 0
    stat="${stat##*) }"
    # shellcheck disable=SC2086 # split into fields
    set -- $stat
    echo "${20}"
}

wait_gone() {  # pid $1, for at most $2 tenths of a second
    for _ in $(seq 1 "$2"); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

# --- the firewall the engine changes ------------------------------------------------------------
tables=(filter nat)
# What marks a rule or a chain as Docker's: its chains' names and its bridges' interfaces.
docker_rule='DOCKER|docker0|docker_gwbridge|br-[0-9a-f]{12}'

save_netfilter() {  # FILE: each table's rules (`iptables -S`), under a "*TABLE" line
    local table
    {
        for table in "${tables[@]}"; do
            echo "*$table"
            iptables -t "$table" -S
        done
        # The engine turns forwarding on (and FORWARD's policy to DROP, when it was off).
        echo "*ip_forward"
        cat /proc/sys/net/ipv4/ip_forward
    } >"$1"
}

netfilter_before() {  # FILE TABLE: that table's lines in FILE
    awk -v t="*$2" '/^\*/ { on = ($0 == t); next } on' "$1"
}

# The bridge interfaces of the engine at $socket: the rules naming them are this engine's own.
engine_bridges() {
    local ids
    ids="$(DOCKER_HOST="unix://$socket" docker network ls -q --filter driver=bridge 2>/dev/null)" || return 0
    [[ -n $ids ]] || return 0
    # shellcheck disable=SC2086 # one id a word
    DOCKER_HOST="unix://$socket" docker network inspect $ids \
        --format '{{.Id}} {{with index .Options "com.docker.network.bridge.name"}}{{.}}{{end}}' 2>/dev/null \
        | while read -r id name; do echo "${name:-br-${id:0:12}}"; done
}

# Whether a dockerd other than the one just stopped runs in this network namespace.
other_engine_here() {
    local pid here
    here="$(readlink /proc/self/ns/net)"
    for pid in $(pgrep -x dockerd || true); do
        [[ $(readlink "/proc/$pid/ns/net" 2>/dev/null) == "$here" ]] && return 0
    done
    return 1
}

iptables_delete() {  # TABLE RULE (as `iptables -S` prints it: "-A CHAIN ...")
    eval "iptables -t $1 ${2/#-A /-D }" 2>/dev/null
}

# The interfaces rule $1 names (-i, -o) that are not this engine's bridges ($bridges).
foreign_interfaces() {
    grep -oE -- '-[io] [^ ]+' <<<"$1" | cut -d' ' -f2 | grep -vxF -f <(printf '%s\n' "$bridges") || true
}

# What the engine added and left, given FILE (its netfilter.before) and its bridges ($bridges):
# printed as "TABLE LINE", one a line. With SHARED=1 (another engine runs here, using the same
# chains and policy) only the new Docker rules that name no other engine's bridge: this
# engine's bridges' rules, and the jumps into Docker's chains it added (an engine adds any that
# are missing when it makes a network); else every new Docker rule, chain and changed policy.
netfilter_left() {  # FILE SHARED
    local table line before
    for table in "${tables[@]}"; do
        before="$(netfilter_before "$1" "$table")"
        while IFS= read -r line; do
            grep -qxF -- "$line" <<<"$before" && continue
            if [[ $2 == 1 ]]; then
                [[ $line == -A* ]] && grep -qE -- "$docker_rule" <<<"$line" \
                    && [[ -z $(foreign_interfaces "$line") ]] && echo "$table $line"
            elif [[ $line == -P* ]] || grep -qE -- "$docker_rule" <<<"$line"; then
                echo "$table $line"
            fi
        done < <(iptables -t "$table" -S)
    done
    return 0
}

restore_netfilter() {  # FILE SHARED: undo what netfilter_left finds; fails if any is left
    local table line chain policy left forward
    # Rules first (so that no jump names a chain any more), then chains, then policies.
    while read -r table line; do
        [[ $line == -A* ]] && iptables_delete "$table" "$line"
    done < <(netfilter_left "$1" "$2")
    while read -r table line; do
        if [[ $line == -N* ]]; then
            chain="${line#-N }"
            iptables -t "$table" -F "$chain" 2>/dev/null && iptables -t "$table" -X "$chain" 2>/dev/null
        fi
    done < <(netfilter_left "$1" "$2")
    while read -r table line; do
        if [[ $line == -P* ]]; then
            chain="$(cut -d' ' -f2 <<<"$line")"
            policy="$(netfilter_before "$1" "$table" | awk -v c="$chain" '$1 == "-P" && $2 == c { print $3 }')"
            [[ -n $policy ]] && iptables -t "$table" -P "$chain" "$policy"
        fi
    done < <(netfilter_left "$1" "$2")
    left="$(netfilter_left "$1" "$2")"
    forward="$(netfilter_before "$1" ip_forward)"
    if [[ $2 == 0 && $forward =~ ^[01]$ && $(cat /proc/sys/net/ipv4/ip_forward) != "$forward" ]]; then
        echo "$forward" >/proc/sys/net/ipv4/ip_forward || left+=$'\n'"net.ipv4.ip_forward is not $forward again"
    fi
    if [[ -n $left ]]; then
        echo "error: the engine's firewall changes could not all be undone (iptables -t TABLE -S):" >&2
        sed 's/^/  /' <<<"$left" >&2
        return 1
    fi
    # Bridges the engine left (the rules naming them are gone now).
    while IFS= read -r line; do
        [[ -n $line ]] || continue
        if ip link show "$line" >/dev/null 2>&1; then
            ip link del "$line" 2>/dev/null || { echo "error: bridge $line could not be removed" >&2; return 1; }
        fi
    done <<<"$bridges"
}

stop_engine() {
    local pid pids
    pid="$(cat "$pidfile" 2>/dev/null || true)"
    if [[ $pid =~ ^[0-9]+$ ]] && is_engine "$pid" "$pidfile" && kill "$pid" 2>/dev/null; then
        # dockerd stops its containers (10 s each at most, in parallel) and its containerd first.
        if ! wait_gone "$pid" 300; then
            echo "dockerd ($pid) did not stop within 30 s; killing it" >&2
            kill -9 "$pid" 2>/dev/null || true
            wait_gone "$pid" 50 || { echo "dockerd ($pid) survived SIGKILL" >&2; return 1; }
        fi
    fi
    # A dockerd that was killed or crashed leaves its containerd and the containers' shims
    # running, and the containers too: the first process of each is a shim's child (killing it
    # ends its whole pid namespace).
    pids="$(engine_processes "$dir")"
    [[ -z $pids ]] && return 0
    for pid in $pids; do
        pids+=" $(pgrep -P "$pid" || true)"
    done
    local started=()
    for pid in $pids; do
        started+=("$pid:$(start_time "$pid")")
    done
    echo "stopping what the engine left running (containerd, shims, containers): $(echo $pids)" >&2
    # shellcheck disable=SC2086 # one pid a word
    kill $pids 2>/dev/null || true
    sleep 2
    for pid in "${started[@]}"; do  # the same processes, not others that got their pids since
        [[ "${pid%%:*}:$(start_time "${pid%%:*}")" != "$pid" ]] || kill -9 "${pid%%:*}" 2>/dev/null || true
    done
    sleep 0.5
    [[ -z "$(engine_processes "$dir")" ]]
}

if [[ $stop == 1 ]]; then
    [[ -d $dir ]] || exit 0
    dir="$(cd "$dir" && pwd -P)"  # mountinfo shows the physical path
    pidfile="$dir/dockerd.pid"
    # Checked first: a wrong folder (say /) must not have its mounts undone, nor be removed.
    # An empty one is what an engine that never started leaves.
    if rmdir "$dir" 2>/dev/null; then
        exit 0
    fi
    # One whose removal failed half-way (a mount left in x/) may be cleaned up again.
    if [[ ! -e $dir/dockerd.log && ! -d $dir/x ]]; then
        echo "error: $dir holds no engine (no dockerd.log, no x/); nothing was stopped or removed" >&2
        exit 1
    fi
    socket="$dir/docker.sock"
    bridges="$(engine_bridges)"
    stop_engine || { echo "error: the engine in $dir is still running; nothing was removed" >&2; exit 1; }
    firewall_left=0
    if [[ -f $dir/netfilter.before ]] && command -v iptables >/dev/null; then
        shared=0
        other_engine_here && shared=1
        # On failure the rest is still removed (what is left was listed), and the stop fails.
        restore_netfilter "$dir/netfilter.before" "$shared" || firewall_left=1
    fi
    while IFS= read -r target; do
        umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null || true
    done < <(mounts_under "$dir")
    left="$(mounts_under "$dir")"
    if [[ -n $left ]]; then
        echo "error: these mounts under $dir could not be undone (umount, then umount -l):" >&2
        sed 's/^/  /' <<<"$left" >&2
        exit 1
    fi
    rm -rf "$dir" 2>/dev/null || true
    if [[ -e $dir ]]; then
        echo "error: $dir could not be removed:" >&2
        rm -rf "$dir" 2>&1 | head -n 5 >&2
        exit 1
    fi
    exit "$firewall_left"
fi

mkdir -p "$dir"
dir="$(cd "$dir" && pwd -P)"
pidfile="$dir/dockerd.pid"
socket="$dir/docker.sock"

command -v dockerd >/dev/null || { echo "dockerd is missing: apt-get install -y docker.io" >&2; exit 1; }
if [[ -S $socket ]] && DOCKER_HOST="unix://$socket" docker version >/dev/null 2>&1; then
    echo "export DOCKER_HOST=unix://$socket"
    exit 0
fi

# The firewall as it was before this engine, for --stop to put back (written once: a start
# after an engine of this folder died must not take that engine's leftovers for the original).
if command -v iptables >/dev/null && [[ ! -f $dir/netfilter.before ]]; then
    save_netfilter "$dir/netfilter.before"
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
