#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netns.loss: random packet loss on one data link (host B's eth2, both ways:
# nftables `numgen random mod 100 < N drop`, scripts/testbed loss) while B
# sends 64 MiB x 16 to A, verified. TCP must repair every loss: each run must
# end in byte-verified success (exit 0 with --verify) within 40 s. Runs with
# 0% (the reference), 1% and 5% and prints
#   RESULT loss: 0% X GB/s, 1% Y GB/s, 5% Z GB/s (verified)
. "$(dirname "$0")/lib.sh"
command -v nft >/dev/null 2>&1 || { echo "SKIP: nft is not installed (Debian package nftables)"; exit 77; }

LIMIT=40
# A lost SYN is sent again after 1 s, then 2 s more: at 5% loss a comm's
# connections (1 + TPX_NSOCKS per comm, 16 comms) now and then arrive 3 s
# apart, and the listener would drop the half-built comm at the default
# TPX_SOCK_HELLO_TIMEOUT_MS (3 s; SECURITY.md): lossy links need it longer.
export TPX_SOCK_HELLO_TIMEOUT_MS=15000
# TCP segments HOST retransmitted so far (/proc/net/snmp, its namespace)
retrans() {
    "$TESTBED" exec "$1" awk '/^Tcp:/ { if (h) { print $13; exit } h = 1 }' /proc/net/snmp
}
summary=""
for pct in 0 1 5; do
    if [ "$pct" = 0 ]; then
        "$TESTBED" clear B eth2 || fail "testbed clear failed"
    else
        "$TESTBED" loss B eth2 "$pct" || fail "testbed loss failed"
    fi
    rt0=$(retrans B); tx0=$(tx_bytes B eth2)
    t0=$(now_ms)
    start_server --size 64M --iters 16 --warmup 1 --verify --timeout 30
    start_client
    if ! wait_pair $LIMIT "$t0"; then
        show_logs
        result "loss: HANG at ${pct}% loss on B/eth2 (server rc $SERVER_RC, client rc $CLIENT_RC after $LIMIT s)"
        fail "run with ${pct}% loss did not end in $LIMIT s"
    fi
    srv=$(perf_outcome "$WORK/server.log" "$SERVER_RC")
    cli=$(perf_outcome "$WORK/client.log" "$CLIENT_RC")
    if [ "$srv" != verified ] || [ "$cli" != verified ]; then
        show_logs
        result "loss: FAILED at ${pct}% loss on B/eth2 (server: $srv, client: $cli)"
        fail "run with ${pct}% loss did not end in verified success"
    fi
    gbps=$(sed -n 's/^# best: \([0-9.]*\) GB\/s.*/\1/p' "$WORK/client.log" | head -1)
    [ -n "$gbps" ] || { show_logs; fail "no '# best:' line from the client"; }
    rt=$(($(retrans B) - rt0)); tx=$(($(tx_bytes B eth2) - tx0))
    echo "${pct}% loss on B/eth2: $gbps GB/s, verified, run took $(secs $((CLIENT_MS > SERVER_MS ? CLIENT_MS : SERVER_MS))) s;" \
        "B/eth2 sent $tx bytes, B retransmitted $rt TCP segments"
    [ "$tx" -gt 10000000 ] || fail "B/eth2 carried only $tx bytes: the lossy link was not used"
    summary="$summary, ${pct}% $gbps GB/s ($rt retransmits)"
done
result "loss: ${summary#, } (one link of 4, B/eth2 both ways; 64 MiB x 16, every byte verified)"
echo PASS
