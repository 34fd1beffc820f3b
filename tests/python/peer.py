# SPDX-License-Identifier: Apache-2.0
"""A peer process for the two-process tests: `peer.py nixl|tpx NAME SIZE SEED`.

It registers SIZE bytes (pattern SEED) and prints its metadata; then it
answers line commands on stdin (one reply line each on stdout):
  LOAD <hex>   load a peer's metadata (to send it notifications)
  NOTIFS       notifications received so far: "NOTIFS <json {sender: [hex, ...]}>"
  SUM          "SUM <sha256 of the buffer>"
  NOTIFY <agent> <hex>   a standalone notification to that agent
  QUIT
Metadata travels as NIXL and tpx intend it to: the blob of
get_agent_metadata() / tpx.Engine.metadata(), loaded on the other side."""
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import conftest  # noqa: E402  (environment: plugin dir, loopback)
import nixl_util  # noqa: E402


def out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    mode, name, size, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    buf = conftest.pattern(size, seed)
    notifs = {}
    if mode == "nixl":
        agent = nixl_util.new_agent(name)
        nixl_util.reg(agent, buf)
        out("MD " + agent.get_agent_metadata().hex())
        out("ADDR %d" % buf.ctypes.data)

        def poll():
            for k, v in agent.get_new_notifs().items():
                notifs.setdefault(k if isinstance(k, str) else k.decode(), []).extend(
                    m.hex() for m in v)
    else:
        import tpx
        eng = tpx.Engine(name=name)
        region = eng.register(buf)
        out("MD " + eng.metadata().hex())
        out("DESC " + region.export().hex())
        remotes = {}

        def poll():
            for who, m in eng.notifs():
                notifs.setdefault(who, []).append(m.hex())
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "LOAD":
            if mode == "nixl":
                out("LOADED " + str(agent.add_remote_agent(bytes.fromhex(cmd[1]))))
            else:
                r = eng.load_remote(bytes.fromhex(cmd[1]))
                remotes[r.name] = r
                out("LOADED " + r.name)
        elif cmd[0] == "NOTIFS":
            poll()
            out("NOTIFS " + json.dumps(notifs))
        elif cmd[0] == "SUM":
            out("SUM " + hashlib.sha256(buf.tobytes()).hexdigest())
        elif cmd[0] == "NOTIFY":
            if mode == "nixl":
                agent.send_notif(cmd[1], bytes.fromhex(cmd[2]))
            else:
                remotes[cmd[1]].notify(bytes.fromhex(cmd[2]))
            out("NOTIFIED")
        elif cmd[0] == "QUIT":
            break
    out("BYE")


if __name__ == "__main__":
    main()
