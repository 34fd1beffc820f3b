#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tools.token: the authentication token never leaks (SECURITY.md).
#   1. tpx-perf --print-config shows TPX_AUTH_TOKEN=(set, hidden), never the
#      token; its --json record neither.
#   2. TPX_AUTH_TOKEN_FILE: a server reading the token from a 0600 file
#      serves a client that has it in TPX_AUTH_TOKEN, and refuses one with a
#      wrong token; a file readable by others is used with a warning; both
#      variables set is a configuration error; a FIFO is refused, not
#      waited on.
#   3. tpx-launch --hosts over the fake ssh (fake_ssh.sh records every argv)
#      with TPX_AUTH_TOKEN set and TPX_LOG_LEVEL=debug: the run succeeds,
#      both nodes' processes authenticated ("mutually authenticated" in their
#      logs), the token is in no ssh argv, in no copied log, JSON or output,
#      and the nodes' token files are gone afterwards.
#   usage: token.sh TPX-PERF TPX-LAUNCH TESTS-DIR
set -u
perf=$1 launch=$2 tests=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/tpx-token-test.XXXXXX")
srv=""
cleanup() {
    [ -z "$srv" ] || { kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; }
    rm -rf "$dir"
}
trap cleanup EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
secret="tok-$$-$RANDOM-s3cr3t"
export TPX_SOCKET_IFNAME=lo
unset TPX_AUTH_TOKEN TPX_AUTH_TOKEN_FILE

# 1. --print-config and --json
out=$(TPX_AUTH_TOKEN=$secret "$perf" --print-config 2>&1)
grep -q "^TPX_AUTH_TOKEN=(set, hidden)$" <<<"$out" || bad "--print-config: no 'TPX_AUTH_TOKEN=(set, hidden)' line"
grep -qF "$secret" <<<"$out" && bad "--print-config printed the token"
TPX_AUTH_TOKEN=$secret "$perf" --loopback --size 4K --iters 1 --json "$dir/loop.json" \
    >"$dir/loop.out" 2>&1 || { cat "$dir/loop.out"; bad "loopback run with a token"; }
grep -qF "$secret" "$dir/loop.json" "$dir/loop.out" && bad "tpx-perf's JSON or output holds the token"

# 2. TPX_AUTH_TOKEN_FILE
. "$(dirname "$0")/ports.sh"
printf '%s\n' "$secret" >"$dir/token"
chmod 600 "$dir/token"
out=$(TPX_AUTH_TOKEN_FILE=$dir/token "$perf" --print-config 2>&1)
grep -q "^TPX_AUTH_TOKEN=(set, hidden)$" <<<"$out" || bad "TPX_AUTH_TOKEN_FILE: the token was not read"
grep -q "accessible to group or others" <<<"$out" && bad "a 0600 token file drew a warning"
chmod 644 "$dir/token"
out=$(TPX_AUTH_TOKEN_FILE=$dir/token "$perf" --print-config 2>&1)
grep -q "accessible to group or others" <<<"$out" || bad "a 0644 token file drew no warning"
chmod 600 "$dir/token"
out=$(TPX_AUTH_TOKEN=x TPX_AUTH_TOKEN_FILE=$dir/token "$perf" --loopback --size 4K --iters 1 2>&1)
rc=$?
{ [ $rc -ne 0 ] && grep -q "both set" <<<"$out"; } || bad "both token variables set: exit $rc, $out"
out=$(TPX_AUTH_TOKEN_FILE=$dir/missing "$perf" --loopback --size 4K --iters 1 2>&1) &&
    bad "a missing token file was not an error"
# A token over 255 bytes is refused, from the variable as from the file (never cut).
long=$(head -c 256 /dev/zero | tr '\0' k)
out=$(TPX_AUTH_TOKEN=$long "$perf" --loopback --size 4K --iters 1 2>&1)
rc=$?
{ [ $rc -ne 0 ] && grep -q "at most 255" <<<"$out"; } || bad "a 256-byte TPX_AUTH_TOKEN: exit $rc, $out"
printf '%s\n' "$long" >"$dir/long"
chmod 600 "$dir/long"
out=$(TPX_AUTH_TOKEN_FILE=$dir/long "$perf" --loopback --size 4K --iters 1 2>&1)
rc=$?
{ [ $rc -ne 0 ] && grep -q "1..255 bytes" <<<"$out"; } || bad "a 256-byte token file: exit $rc, $out"
# A FIFO (no writer) is refused at once, not waited on forever.
mkfifo "$dir/fifo"
out=$(TPX_AUTH_TOKEN_FILE=$dir/fifo timeout 20 "$perf" --loopback --size 4K --iters 1 2>&1)
rc=$?
{ [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "not a regular file" <<<"$out"; } ||
    bad "TPX_AUTH_TOKEN_FILE naming a FIFO: exit $rc (124: hung), $out"
for want in ok refused; do
    port=$(free_port)
    TPX_AUTH_TOKEN_FILE=$dir/token TPX_PORT_BASE=$((port + 1)) "$perf" --port "$port" server \
        >"$dir/srv.out" 2>&1 &
    srv=$!
    # The client's 5 s set-up budget starts once the server listens, not while its process
    # starts (that alone can take seconds on a loaded 2-core machine).
    for _ in $(seq 300); do
        grep -q "listening on port" "$dir/srv.out" 2>/dev/null && break
        kill -0 "$srv" 2>/dev/null || break
        sleep 0.1
    done
    grep -q "listening on port" "$dir/srv.out" || { cat "$dir/srv.out"; bad "server ($want) did not start listening"; }
    if [ $want = ok ]; then tok=$secret; else tok="wrong-$secret"; fi
    TPX_AUTH_TOKEN=$tok TPX_CONNECT_TIMEOUT_MS=5000 timeout 60 "$perf" --port "$port" --size 64K \
        --iters 2 client 127.0.0.1 >"$dir/cli.out" 2>&1
    rc=$?
    if [ $want = ok ]; then
        [ $rc -eq 0 ] || { cat "$dir/cli.out" "$dir/srv.out"; bad "client with the file's token: exit $rc"; }
        wait "$srv" || { cat "$dir/srv.out"; bad "server with TPX_AUTH_TOKEN_FILE failed"; }
    else
        [ $rc -ne 0 ] || bad "a client with a wrong token was served by a TPX_AUTH_TOKEN_FILE server"
        kill "$srv" 2>/dev/null
        wait "$srv" 2>/dev/null
    fi
    srv=""
done
echo "token file: read, mode checked, right token served, wrong token refused"

# 3. tpx-launch --hosts over the fake ssh
mkdir "$dir/bin" "$dir/tmp"
cp "$tests/fake_ssh.sh" "$dir/bin/ssh"
chmod +x "$dir/bin/ssh"
# tpx-launch's ports: BASE+I (control) and BASE+100+I (engine): a free range.
port=$(python3 - <<'PY' 2>/dev/null || echo $((21000 + $$ % 9000))
import random, socket
for _ in range(100):
    b = random.randrange(20000, 32000)
    ok = True
    for p in range(b, b + 102):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            ok = False
        finally:
            s.close()
        if not ok:
            break
    if ok:
        print(b); break
PY
)
PATH="$dir/bin:$PATH" FAKE_SSH_LOG="$dir/ssh.log" TMPDIR="$dir/tmp" TPX_AUTH_TOKEN=$secret \
    TPX_LOG_LEVEL=debug timeout -k 5 100 "$launch" --hosts node-a,node-b --server-addr 127.0.0.1 \
    --nprocs 1 --port-base "$port" --timeout 60 --perf "$perf" --no-counters \
    --logdir "$dir/run" --remote-logdir "$dir/remote" -- --size 64K --iters 2 \
    >"$dir/launch.out" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$dir/launch.out"; bad "tpx-launch --hosts with a token: exit $rc"; }
grep -q "^argv: ssh .*node-a" "$dir/ssh.log" || bad "the fake ssh recorded no argv"
grep -q -- "--token-stdin" "$dir/ssh.log" || bad "the nodes' launchers did not get --token-stdin"
grep -qF "$secret" "$dir/ssh.log" && bad "the token is on an ssh command line"
grep -rqF "$secret" "$dir/run" "$dir/launch.out" && bad "the token is in a copied log: $(grep -rlF "$secret" "$dir/run" "$dir/launch.out")"
for node in node0 node1; do
    grep -q "mutually authenticated" "$dir/run/$node"/*.log ||
        bad "$node: its process did not authenticate (the token did not reach it)"
done
left=$(ls -A "$dir/tmp")
[ -z "$left" ] || bad "token file(s) left behind in TMPDIR: $left"
out=$(PATH="$dir/bin:$PATH" TPX_AUTH_TOKEN=$secret "$launch" --hosts a,b --nprocs 1 --perf "$perf" \
    --dry-run 2>&1)
grep -qF "$secret" <<<"$out" && bad "--dry-run printed the token"
[ $fail -eq 0 ] && echo "ok: the token is in no argv, log, JSON or output"
exit $fail
