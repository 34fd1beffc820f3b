#!/usr/bin/env bash
# tools.launch.kill: a launcher killed with SIGKILL (which runs no trap)
# leaves neither its processes nor its token behind (SECURITY.md).
#   1. tpx-launch --token-stdin --role server --nprocs 3 (three tpx-perf
#      servers that wait for a client forever), the token on its standard
#      input, TMPDIR a fresh folder: once both servers listen, no file in
#      TMPDIR holds the token (nor any tpx-token.* file), and each server
#      got the token (TPX_AUTH_TOKEN_FILE names an inherited descriptor): a
#      client with the token is served by the first ("mutually
#      authenticated"), which then exits.
#   2. kill -9 of the launcher: within 10 s the other two servers are gone
#      and TMPDIR is still empty.
#   usage: launch_kill.sh TPX-LAUNCH TPX-PERF
set -u
launch=$1 perf=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/tpx-launch-kill.XXXXXX")
lpid="" kids=""
# shellcheck disable=SC2317 # run by the trap
cleanup() {
    [ -z "$lpid" ] || kill -KILL "$lpid" 2>/dev/null
    for p in $kids; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$dir"
}
trap cleanup EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
secret="tok-$$-$RANDOM-k1ll"
export TPX_SOCKET_IFNAME=lo TPX_LOG_LEVEL=debug
unset TPX_AUTH_TOKEN TPX_AUTH_TOKEN_FILE
. "$(dirname "$0")/ports.sh"
mkdir "$dir/tmp"

# tpx-launch's ports for indices 0..2: BASE+I (control), BASE+100+I (engine).
base=""
for _ in $(seq 50); do
    b=$(free_port)
    p2=$(python3 - "$b" <<'PY' 2>/dev/null
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
    [ "$p2" = ok ] && { base=$b; break; }
done
[ -n "$base" ] || { echo "no free ports found"; exit 1; }

printf '%s\n' "$secret" | TMPDIR="$dir/tmp" "$launch" --token-stdin --role server --nprocs 3 \
    --port-base "$base" --perf "$perf" --no-counters --logdir "$dir/run" -- --size 4K --iters 1 \
    >"$dir/launch.out" 2>&1 &
lpid=$!
for i in 0 1 2; do
    for _ in $(seq 300); do
        grep -q "listening on port" "$dir/run/server-$i.log" 2>/dev/null && break
        sleep 0.1
    done
    grep -q "listening on port" "$dir/run/server-$i.log" 2>/dev/null ||
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

kill -KILL "$lpid"
wait "$lpid" 2>/dev/null
lpid=""
alive=""
for _ in $(seq 100); do
    alive=""
    for p in $kids; do
        # a zombie (not reaped yet by its new parent) is dead: only "ps -o stat" tells
        st=$(ps -o stat= -p "$p" 2>/dev/null)
        [ -n "$st" ] && [ "${st#Z}" = "$st" ] && alive="$alive $p"
    done
    [ -z "$alive" ] && break
    sleep 0.1
done
[ -z "$alive" ] || bad "process(es) of the killed launcher still run 10 s later:$alive ($(ps -o pid=,args= -p "${alive# }" 2>/dev/null))"
left=$(ls -A "$dir/tmp")
[ -z "$left" ] || bad "the killed launcher left file(s) behind: $left"
[ $fail -eq 0 ] && echo "ok: no token file at any time; the processes died with the killed launcher"
exit $fail
