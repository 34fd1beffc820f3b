#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A stand-in for ssh on PATH (as "ssh"): `ssh [-o OPT]... HOST COMMAND`
# runs COMMAND here with sh -c, in an environment as bare as a fresh login
# (only PATH, HOME and TMPDIR kept), so that only what the caller forwards
# explicitly reaches it. Each call is logged to $FAKE_SSH_LOG: "HOST COMMAND",
# and its whole argv, options included, one "argv: ARG ARG..." line (what
# `ps` would show of a real ssh). Standard input goes to COMMAND.
[ -z "${FAKE_SSH_LOG:-}" ] || echo "argv: ssh $*" >>"$FAKE_SSH_LOG"
while [ $# -gt 0 ]; do
    case $1 in
        -[opliFJ]) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || { echo "fake ssh: usage: ssh [-o OPT] HOST COMMAND" >&2; exit 255; }
host=$1
shift
[ -z "${FAKE_SSH_LOG:-}" ] || echo "$host $*" >>"$FAKE_SSH_LOG"
exec env -i PATH="$PATH" HOME="${HOME:-/}" TMPDIR="${TMPDIR:-/tmp}" bash -c "$*"
