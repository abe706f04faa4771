#!/usr/bin/env bash
# A real two-node Docker Swarm on one machine, for tests and CI:
#
#   eval "$(docker/swarm-cluster.sh start /tmp/swarm)"  # sets DOCKER_HOST and CHAINS_SWARM_NODES
#   docker/swarm-cluster.sh stop-node /tmp/swarm         # stops node 2's dockerd (a node failure)
#   docker/swarm-cluster.sh start-node /tmp/swarm        # starts it again; it rejoins by itself
#   docker/swarm-cluster.sh stop /tmp/swarm              # stops both, removes all it created
#
# Node 1 is a private engine in this host's network namespace, started as
# docker/start-engine.sh does (its own folder, no default bridge). Node 2 is a second dockerd in
# a network namespace of its own, joined to the host over a veth pair: the two ends get the two
# addresses of a private /30 that exists on that pair only, so swarm traffic (the manager's
# port 2377, gossip on 7946, VXLAN on 4789) runs between these two test hosts and nowhere else.
# Inside the namespace dockerd needs the cgroup hierarchies mounted again (`ip netns exec`
# remounts /sys): a small wrapper (FOLDER/node2/dockerd-in-netns.sh) mounts them in a private
# mount namespace, names the node chains-node2 in a UTS namespace of its own, and becomes
# dockerd. Node 1 runs `swarm init`, node 2 `swarm join`: node 1 is the only manager.
#
# `start` prints the variables to use it (DOCKER_HOST: node 1; CHAINS_SWARM_NODES: node 2's
# engine, where `chains push --target swarm` loads the images) and CHAINS_SWARM_IPSEC=1 or 0:
# whether this kernel can do the IPsec (ESP, AES-GCM) an encrypted overlay network needs.
# Without it the swarm drops the traffic of an encrypted network between nodes.
#
# `stop` stops every dockerd by its PID and then removes the namespace, the veth pair, the
# bridge and firewall rules node 1 added for swarm (docker_gwbridge, DOCKER-INGRESS), Docker's
# chains and FORWARD's policy as start-engine.sh --stop puts them back, the mount of
# /run/netns that `ip netns add` made (when no other namespace is in it), and any mount left
# under FOLDER; it fails loudly when something could not be removed.
#
# One cluster per machine at a time: node 1's docker_gwbridge and VXLAN port are the host's
# (`start` refuses when docker_gwbridge exists). Engines started by start-engine.sh, which do
# not run swarm mode, can run beside it.
# Needs root, dockerd, iproute2 and iptables (Debian: apt-get install -y docker.io iproute2
# iptables). CHAINS_SWARM_SUBNET (default 10.213.7.0) picks the /30 of the link. Each node's
# folder is a tmpfs of at most CHAINS_SWARM_TMPFS_MB (default 4096; 0: on disk) when the
# machine has three times that memory available.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
command="${1:-}"
dir="${2:-}"
if [[ -z $command || -z $dir ]]; then
    echo "usage: swarm-cluster.sh start|stop|stop-node|start-node FOLDER" >&2
    exit 2
fi
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
state="$dir/cluster.env"

die() { echo "swarm-cluster: $*" >&2; exit 1; }

# Names derived from the folder: two clusters in two folders do not meet.
tag="$(printf '%s' "$dir" | sha256sum | cut -c1-6)"
netns="chains-sw-$tag"
veth_host="csw${tag}h"
veth_node="csw${tag}n"
subnet="${CHAINS_SWARM_SUBNET:-10.213.7.0}"
prefix="${subnet%.*}"
last="${subnet##*.}"
addr1="$prefix.$((last + 1))"
addr2="$prefix.$((last + 2))"
node1="$dir/node1"
node2="$dir/node2"
sock1="unix://$node1/docker.sock"
sock2="unix://$node2/docker.sock"

wait_engine() {  # SOCKET SECONDS
    local i
    for i in $(seq 1 $(($2 * 10))); do
        DOCKER_HOST="$1" docker version >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

stop_pid() {  # PID NAME: SIGTERM, up to 40 s (dockerd stops its containers first), then SIGKILL
    local pid="$1" i
    kill -0 "$pid" 2>/dev/null || return 0
    kill "$pid" 2>/dev/null || return 0
    for i in $(seq 1 400); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    echo "swarm-cluster: $2 ($pid) did not stop within 40 s; killing it" >&2
    kill -9 "$pid" 2>/dev/null || true
    sleep 0.5
}

start_node2() {
    mkdir -p "$node2"
    # The host's cgroup mounts, to be made again inside node 2's private mount namespace.
    local mounts
    mounts="$(awk '$3 == "cgroup" || $3 == "cgroup2" { print $2, $3, $4 }' /proc/self/mounts)"
    [[ -n $mounts ]] || die "no cgroup hierarchy is mounted on this host; dockerd needs them"
    cat >"$node2/dockerd-in-netns.sh" <<EOF
#!/bin/sh
# Run by \`ip netns exec\` in node 2's namespace: mount the cgroup hierarchies (the remount of
# /sys hid them), privately to this mount namespace, then become dockerd.
set -e
hostname chains-node2
mount --make-rprivate /
mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
while read -r path type options; do
    mkdir -p "\$path"
    if [ "\$type" = cgroup2 ]; then
        mount -t cgroup2 cgroup2 "\$path"
    else
        mount -t cgroup -o "\$options" cgroup "\$path"
    fi
done <<'MOUNTS'
$mounts
MOUNTS
exec dockerd \\
    --host "$sock2" \\
    --data-root "$node2/data" \\
    --exec-root "$node2/x" \\
    --pidfile "$node2/dockerd.pid" \\
    --bridge=none
EOF
    chmod +x "$node2/dockerd-in-netns.sh"
    rm -f "$node2/docker.sock"
    # setsid: the engine outlives this script. `ip netns exec` and sh exec in turn, so $! is
    # dockerd's own PID.
    setsid ip netns exec "$netns" unshare -m -u "$node2/dockerd-in-netns.sh" \
        >>"$node2/dockerd.log" 2>&1 </dev/null &
    echo "$!" >"$node2/launcher.pid"
    wait_engine "$sock2" 30 || {
        tail -n 20 "$node2/dockerd.log" >&2
        die "node 2's dockerd did not answer within 30 s (its log's end is above)"
    }
}

node2_pid() {
    [[ -f $node2/dockerd.pid ]] && cat "$node2/dockerd.pid"
}

case "$command" in
start)
    [[ $(id -u) == 0 ]] || die "needs root (network namespaces, veth, a second dockerd)"
    for tool in dockerd docker ip unshare iptables; do
        command -v "$tool" >/dev/null || die "$tool is missing: apt-get install -y docker.io iproute2 iptables"
    done
    if [[ -f $state ]] && DOCKER_HOST="$sock1" docker node ls >/dev/null 2>&1; then
        cat "$state"
        exit 0
    fi
    if ip link show docker_gwbridge >/dev/null 2>&1; then
        die "docker_gwbridge already exists in this host's network namespace: another swarm engine runs here"
    fi
    # Each node's folder (its images, layers, containers) on a tmpfs when memory allows: the
    # engines' disk traffic is most of a test run's, and removing a tmpfs is one umount, where
    # deleting tens of thousands of layer files takes minutes on a busy disk.
    tmpfs_mb="${CHAINS_SWARM_TMPFS_MB:-4096}"
    available_mb="$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)"
    if ((tmpfs_mb > 0 && available_mb > 3 * tmpfs_mb)); then
        for node in "$node1" "$node2"; do
            mkdir -p "$node"
            mount -t tmpfs -o "size=${tmpfs_mb}m,mode=0711" chains-swarm "$node"
        done
    fi
    # Node 1: this host's namespace, as start-engine.sh starts an engine.
    "$here/start-engine.sh" "$node1" >/dev/null
    # The link: a namespace and a veth pair with the two addresses of one /30. `ip netns add`
    # makes /run/netns (and mounts it onto itself, shared) when it is not yet: noted, for
    # `stop` to undo.
    {
        [[ -d /run/netns ]] && echo "netns_dir=1" || echo "netns_dir=0"
        mountpoint -q /run/netns 2>/dev/null && echo "netns_mount=1" || echo "netns_mount=0"
    } >"$dir/host.before"
    ip netns add "$netns"
    ip link add "$veth_host" type veth peer name "$veth_node"
    ip link set "$veth_node" netns "$netns"
    ip addr add "$addr1/30" dev "$veth_host"
    ip link set "$veth_host" up
    ip netns exec "$netns" ip addr add "$addr2/30" dev "$veth_node"
    ip netns exec "$netns" ip link set "$veth_node" up
    ip netns exec "$netns" ip link set lo up
    start_node2
    # What an encrypted overlay needs of the kernel: an ESP state with AES-GCM (tried in the
    # namespace, where it harms nothing, and removed again).
    ipsec=0
    if ip netns exec "$netns" ip xfrm state add src "$addr1" dst "$addr2" proto esp spi 0x4242 \
        reqid 4242 mode transport aead 'rfc4106(gcm(aes))' 0x0102030405060708090a0b0c0d0e0f1011121314 64 \
        2>/dev/null; then
        ipsec=1
        ip netns exec "$netns" ip xfrm state flush
    fi
    # Overlay networks from a pool of their own, apart from the link's addresses.
    DOCKER_HOST="$sock1" docker swarm init --advertise-addr "$addr1" --listen-addr "$addr1:2377" \
        --default-addr-pool 10.214.0.0/16 >/dev/null
    token="$(DOCKER_HOST="$sock1" docker swarm join-token -q worker)"
    DOCKER_HOST="$sock2" docker swarm join --token "$token" --advertise-addr "$addr2" \
        --listen-addr "$addr2:2377" "$addr1:2377" >/dev/null
    ready=0
    for _ in $(seq 1 300); do  # 30 s at most
        count="$(DOCKER_HOST="$sock1" docker node ls --format '{{.Status}}' | grep -c '^Ready$' || true)"
        if [[ $count == 2 ]]; then ready=1; break; fi
        sleep 0.1
    done
    [[ $ready == 1 ]] || die "node 2 did not show as Ready within 30 s: $(DOCKER_HOST="$sock1" docker node ls)"
    cat >"$state" <<EOF
export DOCKER_HOST=$sock1
export CHAINS_SWARM_NODES=$sock2
export CHAINS_SWARM_NODE1_ADDR=$addr1
export CHAINS_SWARM_NODE2_ADDR=$addr2
export CHAINS_SWARM_NODE2_HOST=$sock2
export CHAINS_SWARM_LINK=$veth_host
export CHAINS_SWARM_NETNS=$netns
export CHAINS_SWARM_IPSEC=$ipsec
EOF
    cat "$state"
    ;;
stop-node)
    pid="$(node2_pid || true)"
    [[ -n $pid ]] || die "node 2 has no PID file in $node2"
    stop_pid "$pid" "node 2's dockerd"
    ;;
start-node)
    ip netns list | grep -qw "$netns" || die "node 2's namespace $netns is gone; start the cluster again"
    pid="$(node2_pid || true)"
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then exit 0; fi
    start_node2
    ;;
stop)
    problems=()
    pid="$(node2_pid || true)"
    [[ -n $pid ]] && stop_pid "$pid" "node 2's dockerd"
    "$here/start-engine.sh" --stop "$node1" || problems+=("node 1's engine (above)")
    # Whatever the engines started and left (containerd shims after a SIGKILL): only processes
    # whose command line names this cluster's folder.
    for cmdline in $(grep -lsF -- "$dir/" /proc/[0-9]*/cmdline || true); do
        pid="${cmdline#/proc/}"
        pid="${pid%/cmdline}"
        [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
        stop_pid "$pid" "leftover process $(tr '\0' ' ' <"$cmdline" 2>/dev/null | cut -c1-80)"
        kill -0 "$pid" 2>/dev/null && problems+=("process $pid still runs")
    done
    if ip netns list | grep -qw "$netns"; then
        ip netns del "$netns" || problems+=("network namespace $netns")
    fi
    # Deleting the namespace deletes the pair's other end, and with it this one, a moment later.
    for _ in $(seq 1 50); do
        ip link show "$veth_host" >/dev/null 2>&1 || break
        sleep 0.1
    done
    if ip link show "$veth_host" >/dev/null 2>&1; then
        ip link del "$veth_host" 2>/dev/null || ! ip link show "$veth_host" >/dev/null 2>&1 \
            || problems+=("veth $veth_host")
    fi
    # /run/netns as it was before `start`, unless other namespaces are in it now (theirs need it).
    if [[ -f $dir/host.before ]]; then
        netns_dir=1 netns_mount=1
        # shellcheck disable=SC1091 # written by start
        source "$dir/host.before"
        if [[ -z $(ip netns list) ]]; then
            if [[ $netns_mount == 0 ]] && mountpoint -q /run/netns; then
                umount /run/netns || problems+=("the mount of /run/netns onto itself")
            fi
            if [[ $netns_dir == 0 && -d /run/netns ]]; then
                rmdir /run/netns || problems+=("folder /run/netns")
            fi
        elif [[ $netns_mount == 0 ]]; then
            echo "swarm-cluster: left /run/netns mounted: other network namespaces are in it ($(ip netns list | cut -d' ' -f1 | paste -sd' '))" >&2
        fi
    fi
    # What node 1's swarm mode added to this host's namespace. No other engine here runs swarm
    # (start refuses when docker_gwbridge exists), so these are this cluster's.
    if ip link show docker_gwbridge >/dev/null 2>&1; then
        ip link del docker_gwbridge || problems+=("bridge docker_gwbridge")
    fi
    for table in filter nat mangle; do
        while read -r rule; do
            [[ -n $rule ]] || continue
            eval "iptables -t $table ${rule/#-A /-D }" || problems+=("iptables -t $table $rule")
        done < <(iptables -t "$table" -S 2>/dev/null | grep -E '^-A .*(docker_gwbridge|DOCKER-INGRESS|--dport 4789)' || true)
        if iptables -t "$table" -S DOCKER-INGRESS >/dev/null 2>&1; then
            { iptables -t "$table" -F DOCKER-INGRESS && iptables -t "$table" -X DOCKER-INGRESS; } \
                || problems+=("iptables -t $table chain DOCKER-INGRESS")
        fi
    done
    # Mounts the engines left under the folder (overlay layers, namespace files), deepest first,
    # and the nodes' tmpfs.
    while read -r mountpoint; do
        umount "$mountpoint" 2>/dev/null || umount -l "$mountpoint" || problems+=("mount $mountpoint")
    done < <(awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r)
    if ((${#problems[@]})); then
        printf 'swarm-cluster: could not remove: %s\n' "${problems[@]}" >&2
        exit 1
    fi
    rm -rf "$node1" "$node2" "$state" "$dir/host.before"
    ;;
*)
    die "unknown command $command (start, stop, stop-node, start-node)"
    ;;
esac
