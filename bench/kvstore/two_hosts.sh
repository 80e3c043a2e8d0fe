#!/usr/bin/env bash
# Two "hosts" for the cross-host kvstore benchmark (docs/BENCHMARKS.md "get_many across hosts"):
# network namespaces kvbench-a (10.88.0.1) and kvbench-b (10.88.0.2) joined by a veth pair, with
# a one-way delay of RTT/2 on each side's output, so a round trip between them takes RTT.
#
#   bench/kvstore/two_hosts.sh up RTT_US NFQ_DELAY_BIN   # netem when the kernel has it, else nfq_delay
#   bench/kvstore/two_hosts.sh down
#
# Needs root and iproute2. The delay is `tc qdisc add dev eth0 root netem delay` when sch_netem
# exists; otherwise (this VM's kernel has no sch_netem) an nftables rule queues every packet of
# the output hook to nfq_delay (bench/kvstore/nfq_delay.cpp), which holds it RTT/2 and accepts it
# (an iptables NFQUEUE rule: this kernel's nftables lacks the queue expression, its xt NFQUEUE
# target works; needs iptables and libnetfilter-queue).
set -euo pipefail
A=kvbench-a
B=kvbench-b
cmd=${1:-}
case "$cmd" in
  up)
    rtt_us=${2:?RTT in microseconds}
    nfq=${3:-}
    half=$((rtt_us / 2))
    ip netns add $A
    ip netns add $B
    ip link add veth-a type veth peer name veth-b
    ip link set veth-a netns $A
    ip link set veth-b netns $B
    ip -n $A link set veth-a name eth0
    ip -n $B link set veth-b name eth0
    ip -n $A addr add 10.88.0.1/24 dev eth0
    ip -n $B addr add 10.88.0.2/24 dev eth0
    for ns in $A $B; do
      ip -n $ns link set lo up
      ip -n $ns link set eth0 up
    done
    if [ "$half" -gt 0 ]; then
      if ip netns exec $A tc qdisc add dev eth0 root netem delay "${half}us" 2>/dev/null; then
        ip netns exec $B tc qdisc add dev eth0 root netem delay "${half}us"
        echo "delay: tc netem ${half}us per direction"
      else
        [ -x "$nfq" ] || { echo "no sch_netem and no nfq_delay binary given" >&2; exit 1; }
        for ns in $A $B; do
          ip netns exec $ns iptables -A OUTPUT -d 10.88.0.0/24 -j NFQUEUE --queue-num 7
          # Real-time priority: on a busy machine a late wake-up would add to the delay.
          rt=()
          chrt -f 50 true 2>/dev/null && rt=(chrt -f 50)
          ip netns exec $ns setsid "${rt[@]}" "$nfq" 7 "$half" >"/tmp/nfq_delay-$ns.log" 2>&1 < /dev/null &
          echo $! >"/tmp/nfq_delay-$ns.pid"
        done
        echo "delay: nfq_delay ${half}us per direction (no sch_netem)"
      fi
    fi
    echo "hosts: $A 10.88.0.1, $B 10.88.0.2"
    ;;
  down)
    for ns in $A $B; do
      if [ -f "/tmp/nfq_delay-$ns.pid" ]; then
        kill "$(cat "/tmp/nfq_delay-$ns.pid")" 2>/dev/null || true
        rm -f "/tmp/nfq_delay-$ns.pid"
      fi
    done
    ip netns del $A 2>/dev/null || true
    ip netns del $B 2>/dev/null || true
    ;;
  *)
    echo "usage: $0 up RTT_US [NFQ_DELAY_BIN] | down" >&2
    exit 2
    ;;
esac
