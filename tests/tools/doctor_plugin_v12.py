# SPDX-License-Identifier: Apache-2.0
"""tpx-doctor --json against libnccl-net-tpx.so: the tables v7..v12, v12 used,
its device's v11/v12 properties (one request per multi-request, rail and plane
not known: null)."""
import json
import sys

plugin = json.load(open(sys.argv[1]))["plugin"]
assert plugin["exports"] == [7, 8, 9, 10, 11, 12], plugin["exports"]
assert plugin["version_used"] == 12, plugin["version_used"]
dev = plugin["devices"][0]
assert dev["max_multi_request"] == 1, dev
assert dev["rail"] is None and dev["plane"] is None, dev
print("ok")
