"""Start and talk to peer.py."""
import hashlib
import json
import os
import queue
import subprocess
import sys
import threading

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
