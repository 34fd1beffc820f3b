# SPDX-License-Identifier: Apache-2.0
"""Start and talk to peer.py."""
import hashlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


class Peer:
    def __init__(self, mode, name, size, seed):
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "peer.py"), mode, name,
                                   str(size), str(seed)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        self.name = name
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.md = bytes.fromhex(self.expect("MD"))
        self.info = self.expect("ADDR" if mode == "nixl" else "DESC")

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def expect(self, word, timeout=60.0):
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"peer: no {word} line within {timeout}s") from None
            if line is None:
                self.lines.put(None)
                raise AssertionError(f"peer exited (rc {self.p.poll()}) before {word}")
            head, _, rest = line.rstrip("\n").partition(" ")
            if head == word:
                return rest

    def cmd(self, line, reply):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.expect(reply)

    def notifs(self):
        return {k: [bytes.fromhex(m) for m in v]
                for k, v in json.loads(self.cmd("NOTIFS", "NOTIFS")).items()}

    def sha(self):
        return self.cmd("SUM", "SUM")

    def stop(self, timeout=10.0):
        """SIGSTOP, and wait until every thread has stopped: kill() returns
        once the signal is queued, and until one thread takes it the others
        run on (milliseconds on a loaded machine: enough to serve a request)."""
        os.kill(self.p.pid, signal.SIGSTOP)
        end = time.monotonic() + timeout
        task = "/proc/%d/task" % self.p.pid
        while True:
            states = []
            for t in os.listdir(task):
                try:
                    with open(os.path.join(task, t, "stat")) as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
                except FileNotFoundError:
                    pass  # a thread that just exited
            if states and all(s in "Tt" for s in states):
                return
            if time.monotonic() > end:
                raise AssertionError("peer %d did not stop: %s" % (self.p.pid, states))
            time.sleep(0.001)

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(30)

    def close(self):
        if self.p.poll() is None:
            try:
                self.cmd("QUIT", "BYE")
            except Exception:
                pass
            self.p.stdin.close()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(30)


def sha(arr):
    return hashlib.sha256(arr.tobytes()).hexdigest()
