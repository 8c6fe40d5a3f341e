#!/usr/bin/env bash
# Emulates a client's network link with tc netem, from the host, on running containers:
# the container's eth0 egress is its uplink, the host side of its veth pair its downlink.
#   deploy/netem.sh PROFILE CONTAINER...     PROFILE: lan | wan | mobile | off
#   lan     1 Gbit/s both ways, 0.5 ms RTT
#   wan     20 Mbit/s both ways, 40 ms RTT
#   mobile  2 Mbit/s up, 10 Mbit/s down, 100 ms RTT, 0.5 % loss each way
# Needs root, tc (iproute2) and nsenter (util-linux) on the host.
set -euo pipefail
profile="${1:?usage: deploy/netem.sh lan|wan|mobile|off CONTAINER...}"
shift
case "$profile" in
  lan)    up="rate 1gbit delay 250us";            down="rate 1gbit delay 250us" ;;
  wan)    up="rate 20mbit delay 20ms";            down="rate 20mbit delay 20ms" ;;
  mobile) up="rate 2mbit delay 50ms loss 0.5%";   down="rate 10mbit delay 50ms loss 0.5%" ;;
  off)    up=""; down="" ;;
  *) echo "netem: unknown profile $profile (lan, wan, mobile, off)" >&2; exit 2 ;;
esac
for c in "$@"; do
  pid=$(docker inspect -f '{{.State.Pid}}' "$c")
  # "12: eth0@if13: …": the peer of the container's eth0 is interface 13 on the host.
  peer=$(nsenter -t "$pid" -n ip -o link show eth0 | sed -n 's/.*eth0@if\([0-9]*\):.*/\1/p')
  host_if=$(ip -o link | awk -F': ' -v i="$peer" '$1 == i { sub(/@.*/, "", $2); print $2 }')
  [ -n "$host_if" ] || { echo "netem: no host interface for $c" >&2; exit 1; }
  nsenter -t "$pid" -n tc qdisc del dev eth0 root 2>/dev/null || true
  tc qdisc del dev "$host_if" root 2>/dev/null || true
  if [ -n "$up" ]; then
    # shellcheck disable=SC2086
    if ! nsenter -t "$pid" -n tc qdisc add dev eth0 root netem $up limit 10000; then
      echo "netem: cannot add a netem qdisc: this kernel may lack sch_netem (CONFIG_NET_SCH_NETEM)" >&2
      exit 1
    fi
    # shellcheck disable=SC2086
    tc qdisc add dev "$host_if" root netem $down limit 10000
  fi
  echo "netem: $profile on $c (eth0 up, $host_if down)"
done
