#!/usr/bin/env bash
# Worker "hosts" on one machine (issue 18): each host is a network namespace
# with an address of its own on a bridge, so its processes reach PostgreSQL
# over their own network link, as separate machines on one LAN would.
#
#   scripts/hosts.sh up N [SET [OWNER_PID]]   hosts cv<SET>-1 .. cv<SET>-N (SET: default "m")
#   scripts/hosts.sh down [SET]               remove SET (every set when none is named)
#   scripts/hosts.sh cut SET I                cut host I off: its link goes down (no RST, no
#   scripts/hosts.sh heal SET I               ICMP: packets are dropped, as in a partition)
#   scripts/hosts.sh show [SET]
#
# `up` replaces a set of the same name, and first removes every set whose
# owner process is gone (a killed benchmark or test), so nothing stale
# accumulates. It prints shell assignments:
#
#   HOSTS_SERVER=10.77.3.1                    this machine on the bridge: make PostgreSQL
#                                             listen here (listen_addresses)
#   HOSTS_NETWORK=10.77.3.0/24                the hosts' addresses (for pg_hba.conf)
#   HOSTS_NAMESPACES='cvm-1 cvm-2'            run a process on host I: ip netns exec cvm-I …
#   HOSTS_ADDRESSES='10.77.3.11 10.77.3.12'
#
# Layout of set SET with subnet 10.77.X.0/24: bridge cv<SET>br holds
# 10.77.X.1; host I is namespace cv<SET>-I whose eth0 (10.77.X.(10+I)) is
# the peer of cv<SET>h<I> on the bridge. Needs root and iproute2.
set -euo pipefail

STATE=/run/conveyor-hosts
mkdir -p "$STATE"

die() { echo "hosts.sh: $*" >&2; exit 1; }

check_set() {
    [[ $1 =~ ^[a-z0-9]{1,9}$ ]] || die "set name must be 1-9 of [a-z0-9] (interface names are short): $1"
}

owner_of() {
    local pid=$1 fields
    fields=$(cat "/proc/$pid/stat" 2>/dev/null) || return 0
    fields=${fields##*) }
    # Field 22 of /proc/PID/stat (20th after the name): start time, so a
    # reused pid does not keep a dead owner's set alive.
    echo "$pid:$(echo "$fields" | cut -d' ' -f20)"
}

remove_set() {
    local set=$1 count=0 i
    [ -f "$STATE/$set" ] && count=$(sed -n 's/^count=//p' "$STATE/$set")
    for ((i = 1; i <= count; i++)); do
        ip link del "cv${set}h$i" 2>/dev/null || true
        ip netns del "cv$set-$i" 2>/dev/null || true
    done
    ip link del "cv${set}br" 2>/dev/null || true
    rm -f "$STATE/$set"
}

remove_stale() {
    local file set owner
    for file in "$STATE"/*; do
        [ -f "$file" ] || continue
        set=${file##*/}
        owner=$(sed -n 's/^owner=//p' "$file")
        [ -n "$owner" ] || continue
        if [ "$(owner_of "${owner%%:*}")" != "$owner" ]; then
            echo "hosts.sh: removing set $set: its owner ${owner%%:*} is gone" >&2
            remove_set "$set"
        fi
    done
}

free_subnet() {
    local x
    for x in $(seq 1 254); do
        grep -qx "subnet=$x" "$STATE"/* 2>/dev/null && continue
        ip -4 -o addr show | grep -q " 10\.77\.$x\." && continue
        echo "$x"
        return
    done
    die "no free subnet in 10.77.0.0/16"
}

up() {
    local n=$1 set=${2:-m} owner_pid=${3:-} owner="" x i
    [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 200)) || die "up: N must be 1-200"
    check_set "$set"
    if [ -n "$owner_pid" ]; then
        owner=$(owner_of "$owner_pid")
        [ -n "$owner" ] || die "up: no process $owner_pid"
    fi
    remove_stale
    remove_set "$set"
    x=$(free_subnet)
    # The state file comes first: whatever exists of a set, down finds it.
    printf 'count=%s\nsubnet=%s\nowner=%s\n' "$n" "$x" "$owner" >"$STATE/$set"
    ip link add "cv${set}br" type bridge
    ip addr add "10.77.$x.1/24" dev "cv${set}br"
    ip link set "cv${set}br" up
    for ((i = 1; i <= n; i++)); do
        ip netns add "cv$set-$i"
        ip link add "cv${set}h$i" type veth peer name eth0 netns "cv$set-$i"
        ip link set "cv${set}h$i" master "cv${set}br" up
        ip -n "cv$set-$i" addr add "10.77.$x.$((10 + i))/24" dev eth0
        ip -n "cv$set-$i" link set eth0 up
        ip -n "cv$set-$i" link set lo up
    done
    show "$set"
}

show() {
    local set=$1 x n i names="" addresses=""
    [ -f "$STATE/$set" ] || die "no set $set"
    x=$(sed -n 's/^subnet=//p' "$STATE/$set")
    n=$(sed -n 's/^count=//p' "$STATE/$set")
    for ((i = 1; i <= n; i++)); do
        names+="${names:+ }cv$set-$i"
        addresses+="${addresses:+ }10.77.$x.$((10 + i))"
    done
    echo "HOSTS_SERVER=10.77.$x.1"
    echo "HOSTS_NETWORK=10.77.$x.0/24"
    echo "HOSTS_NAMESPACES='$names'"
    echo "HOSTS_ADDRESSES='$addresses'"
}

link() {
    local set=$2 i=$3
    check_set "$set"
    [ -f "$STATE/$set" ] || die "no set $set"
    ip link set "cv${set}h$i" "$1"
}

exec 9>"$STATE/.lock"
flock 9
case "${1:-}" in
up) up "${2:-}" "${3:-}" "${4:-}" ;;
down)
    if [ -n "${2:-}" ]; then
        check_set "$2"
        remove_set "$2"
    else
        for file in "$STATE"/*; do [ -f "$file" ] && remove_set "${file##*/}"; done
    fi
    ;;
cut) link down "${2:-}" "${3:-}" ;;
heal) link up "${2:-}" "${3:-}" ;;
show)
    if [ -n "${2:-}" ]; then show "$2"; else
        for file in "$STATE"/*; do [ -f "$file" ] && echo "# ${file##*/}" && show "${file##*/}"; done
    fi
    ;;
*) sed -n '2,24s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
