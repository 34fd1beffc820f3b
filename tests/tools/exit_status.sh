#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# exit_status.sh STATUS COMMAND [ARG...]: run COMMAND; pass if it exits with
# exactly STATUS (a crash or a different error status fails).
want=$1
shift
"$@"
rc=$?
if [ "$rc" -eq "$want" ]; then
    exit 0
fi
echo "exit_status.sh: exit status $rc, expected $want: $*" >&2
exit 1
