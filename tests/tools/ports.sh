# SPDX-License-Identifier: Apache-2.0
# ports.sh - sourced by tool tests that start a tpx-perf server on a fixed port.
#
# free_port: prints a port P with P + 1 free too (a server's control port and
# its engine's bootstrap port, TPX_PORT_BASE), chosen below the kernel's
# ephemeral range: a port from that range can be handed to some connect() as
# its source port between this check and the server's bind (seen under
# ctest -j with the garbage fuzzers running).
free_port() {
    python3 - <<'PY' 2>/dev/null || echo $((21000 + $$ % 9000))
import random, socket
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except Exception:
    lo = 32768
for _ in range(1000):
    p = random.randint(20000, max(20001, lo - 2))
    socks, ok = [], True
    for q in (p, p + 1):
        s = socket.socket()
        socks.append(s)
        try:
            s.bind(("", q))
        except OSError:
            ok = False
    for s in socks:
        s.close()
    if ok:
        print(p)
        break
PY
}
