#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tools.launch.kill: a launcher killed with SIGKILL (which runs no trap)
# leaves neither its processes nor its token behind (SECURITY.md).
#   1. tpx-launch --token-stdin --role server --nprocs 3 (three tpx-perf
#      servers that wait for a client forever), the token on its standard
#      input, TMPDIR a fresh folder: once the servers listen, no file in
#      TMPDIR exists (the token is in no file with a name) and each server
#      got the token (TPX_AUTH_TOKEN_FILE names an inherited descriptor): a
#      client with the token is served by the first ("mutually
#      authenticated"), which then exits. kill -9 of the launcher: within
#      10 s the other two servers are gone and TMPDIR is still empty.
#   2. tpx-launch --hosts over the fake ssh (fake_ssh.sh: the "remote"
#      launchers run here) with TPX_AUTH_TOKEN set, during a long run: kill
#      -9 of the host-list launcher ends every process under it (ssh, the
#      nodes' launchers and their tpx-perf) within 10 s, TMPDIR empty.
#   usage: launch_kill.sh TPX-LAUNCH TPX-PERF TESTS-DIR
set -u
launch=$1 perf=$2 tests=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/tpx-launch-kill.XXXXXX")
lpid="" kids="" all_kids=""
# shellcheck disable=SC2317 # run by the trap
cleanup() { # what a failed check left running: by pid, never by name
    [ -z "$lpid" ] || kill -KILL "$lpid" 2>/dev/null
    for p in $all_kids; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$dir"
}
trap cleanup EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
secret="tok-$$-$RANDOM-k1ll"
export TPX_SOCKET_IFNAME=lo TPX_LOG_LEVEL=debug
unset TPX_AUTH_TOKEN TPX_AUTH_TOKEN_FILE

# A port base B with B..B+2 and B+100..B+102 free (tpx-launch: BASE+I
# control, BASE+100+I engine), below 20000: the other tool tests take their
# ports from 20000 up, and one that picked a range but has not bound it yet
# looks free.
pick_base() {
    local b ok
    for _ in $(seq 50); do
        b=$((12000 + RANDOM % 7000))
        ok=$(python3 - "$b" <<'PY' 2>/dev/null
import socket, sys
b = int(sys.argv[1])
for p in (b, b + 1, b + 2, b + 100, b + 101, b + 102):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        sys.exit(1)
    finally:
        s.close()
print("ok")
PY
)
        [ "$ok" = ok ] && { echo "$b"; return 0; }
    done
    return 1
}
# Wait up to 30 s for a line in a file.
wait_for() {
    for _ in $(seq 300); do
        grep -q "$1" "$2" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
# Every descendant of pid $1.
descendants() {
    local p
    for p in $(pgrep -P "$1"); do
        echo "$p"
        descendants "$p"
    done
}
# kill -9 the launcher lpid; `kids` (its descendants) must all be gone
# within 10 s (a zombie not reaped yet by its new parent is gone) and
# TMPDIR ($1) empty.
kill_and_check() {
    local what=$1 tmp=$2 alive p st
    all_kids="$all_kids $kids"
    kill -KILL "$lpid"
    wait "$lpid" 2>/dev/null
    lpid=""
    for _ in $(seq 100); do
        alive=""
        for p in $kids; do
            st=$(ps -o stat= -p "$p" 2>/dev/null)
            [ -n "$st" ] && [ "${st#Z}" = "$st" ] && alive="$alive $p"
        done
        [ -z "$alive" ] && break
        sleep 0.1
    done
    # shellcheck disable=SC2086 # a list of pids
    [ -z "$alive" ] || bad "$what: process(es) of the killed launcher still run 10 s later:" \
        "$(ps -o pid=,args= -p "$(echo $alive | tr ' ' ,)" 2>/dev/null | cut -c1-120)"
    [ -z "$(ls -A "$tmp")" ] || bad "$what: the killed launcher left file(s) behind: $(ls -A "$tmp")"
}

# 1. One node's launcher.
mkdir "$dir/tmp"
base=$(pick_base) || { echo "no free ports found"; exit 1; }
printf '%s\n' "$secret" | TMPDIR="$dir/tmp" "$launch" --token-stdin --role server --nprocs 3 \
    --port-base "$base" --perf "$perf" --no-counters --logdir "$dir/run" -- --size 4K --iters 1 \
    >"$dir/launch.out" 2>&1 &
lpid=$!
for i in 0 1 2; do
    wait_for "listening on port" "$dir/run/server-$i.log" ||
        { cat "$dir/launch.out" "$dir/run/server-$i.log"; bad "server-$i did not start listening"; }
done
kids=$(pgrep -P "$lpid" | tr '\n' ' ')
n=$(wc -w <<<"$kids")
[ "$n" -eq 3 ] || bad "the launcher has $n child process(es), expected its 3 servers: $kids"
left=$(ls -A "$dir/tmp")
[ -z "$left" ] || bad "a token file exists while the launcher runs: $left"
grep -rqF "$secret" "$dir/tmp" "$dir/run" "$dir/launch.out" && bad "the token is in a file"
# The token reached the servers: a client that has it is served (server-0).
TPX_AUTH_TOKEN=$secret TPX_CONNECT_TIMEOUT_MS=10000 timeout 60 "$perf" --port "$base" \
    --size 4K --iters 1 client 127.0.0.1 >"$dir/cli.out" 2>&1 ||
    { cat "$dir/cli.out" "$dir/run/server-0.log"; bad "a client with the token was not served"; }
grep -q "mutually authenticated" "$dir/cli.out" ||
    bad "the client did not authenticate (the token did not reach the server)"
kill_and_check "one node" "$dir/tmp"

# 2. The host-list launcher over the fake ssh, killed during a long run.
mkdir "$dir/bin" "$dir/tmp2"
cp "$tests/fake_ssh.sh" "$dir/bin/ssh"
chmod +x "$dir/bin/ssh"
base=$(pick_base) || { echo "no free ports found"; exit 1; }
PATH="$dir/bin:$PATH" TMPDIR="$dir/tmp2" TPX_AUTH_TOKEN=$secret timeout -k 5 100 \
    "$launch" --hosts node-a,node-b --server-addr 127.0.0.1 --nprocs 1 --port-base "$base" \
    --timeout 90 --perf "$perf" --no-counters --logdir "$dir/hrun" --remote-logdir "$dir/remote" \
    -- --size 4K --iters 100000000 >"$dir/hosts.out" 2>&1 &
tpid=$!
for f in node0/server-0 node1/client-0; do
    wait_for "mutually authenticated" "$dir/remote/$f.log" ||
        { cat "$dir/hosts.out" "$dir/remote/$f.log"; bad "$f did not authenticate"; }
done
lpid=$(pgrep -P "$tpid" | head -n 1) # the launcher under `timeout`
kids=$(descendants "$lpid" | tr '\n' ' ')
n=$(ps -o comm= -p "$(tr ' ' , <<<"${kids% }")" 2>/dev/null | grep -c tpx-perf)
[ "$n" -ge 2 ] || bad "--hosts: $n tpx-perf process(es) under the launcher, expected both nodes': $kids"
kill_and_check "--hosts" "$dir/tmp2"
wait "$tpid" 2>/dev/null
[ $fail -eq 0 ] && echo "ok: no token file at any time; the processes died with the killed launcher"
exit $fail
