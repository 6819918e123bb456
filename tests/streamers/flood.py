"""A slow-connection flood against a chief's port (stdlib only: it may run as another OS user).

    python flood.py <port> <connections> <seconds between bytes>

Each connection announces a 65,535-byte header, then sends one byte every few seconds; when the
chief closes it, it reconnects a second later (a flood that gives up is no flood). Prints
`ready` once every connection is open, and on stdin's end one JSON line: how many connections
it opened in all and how many the chief closed.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading


def main() -> None:
    port, n, every = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    stop = threading.Event()
    opened, closed = [0], [0]
    lock = threading.Lock()
    up = threading.Barrier(n + 1)

    def one(first: bool) -> None:
        while not stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                stop.wait(1.0)
                continue
            with lock:
                opened[0] += 1
            if first:
                first = False
                up.wait()
            try:
                s.sendall(struct.pack("!I", 65535))
                s.settimeout(every)
                while not stop.is_set():
                    try:
                        if s.recv(4096) == b"":  # the chief closed it (its challenge is read)
                            break
                    except TimeoutError:
                        s.sendall(b"x")  # one byte of the header, every `every` seconds
            except OSError:
                pass
            s.close()
            with lock:
                closed[0] += 1
            stop.wait(1.0)

    threads = [threading.Thread(target=one, args=(True,), daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    up.wait()
    print("ready", flush=True)
    sys.stdin.read()
    stop.set()
    print(json.dumps({"opened": opened[0], "closed": closed[0]}), flush=True)


if __name__ == "__main__":
    main()
