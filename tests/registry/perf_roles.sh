#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# perf_roles.sh TPX_PERF - run by `test_registry run --` (TPX_METADATA set):
# tpx-perf --metadata with the roles started by hand, as on two hosts. A
# server publishes itself by name, a client finds it by name (and with
# --peer all) and verifies every byte, the server unpublishes on SIGTERM.
set -euo pipefail
perf=$1
name=roles-$$
"$perf" --metadata "$TPX_METADATA" server --name "$name" --size 8M --ttl 5 --duration 120 &
srv=$!
trap 'kill $srv 2>/dev/null || true' EXIT
"$perf" --metadata "$TPX_METADATA" client --peer "$name" --size 8M --iters 3 --timeout 30 |
    tee /dev/stderr | grep -q "all data verified"
"$perf" --metadata "$TPX_METADATA" client --peer all --peers 1 --iters 2 | grep -q "$name"
kill -TERM $srv
wait $srv
trap - EXIT
# gone from the registry: a client looking for it fails with a clear error
if out=$("$perf" --metadata "$TPX_METADATA" client --peer "$name" --timeout 5 2>&1); then
    echo "a client found $name after its server stopped: $out" >&2
    exit 1
fi
echo "$out" | grep -q "no engine named '$name'" || { echo "unclear error: $out" >&2; exit 1; }
echo ok
