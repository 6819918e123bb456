"""A rogue local process attacking a running job's chief (a security probe, as a script).

    python rogue.py <rendezvous dir> <streamers>

It polls for chief.json every millisecond (the port is no secret: `ss -ltn` shows it to every
user), then makes each attack on its own connection, at once, before the real streamers are
likely to have connected: an object-dtype hello, an HTTP request, three 1 GiB length prefixes,
hellos claiming every streamer rank (and an impossible one) with a forged proof, and malformed
hellos. It never reads the job's secret. Prints one JSON line: every attempt with the local
port it came from, and the chief's peak memory (VmHWM, kB) afterwards.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from pathlib import Path


def frame(header: object, payload: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return struct.pack("!I", len(head)) + head + payload


def main() -> None:
    d, streamers = Path(sys.argv[1]), int(sys.argv[2])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            addr = json.loads((d / "chief.json").read_text())
            break
        except (OSError, ValueError):
            time.sleep(0.001)
    else:
        sys.exit("no chief.json")
    job, port = addr["job"], addr["port"]
    hello = {
        "type": "streamer",
        "job": job,
        "procid": 1,
        "node": "rogue",
        "pid": 1,
        "nonce": "ab" * 16,
        "proof": "00" * 32,
    }
    attacks: list[tuple[str, bytes, float]] = [
        (
            "object-dtype hello",
            frame({**hello, "rank": 0, "arrays": [["x", "O", [4]]]}, b"\x41" * 32),
            0.5,
        ),
        ("HTTP request", b"GET / HTTP/1.0\r\n\r\n", 0.5),
        *[(f"1 GiB length prefix {i}", struct.pack("!I", 1 << 30), 2.0) for i in range(3)],
        *[
            (f"claim of streamer rank {r}", frame({**hello, "rank": r}), 0.5)
            for r in range(streamers)
        ],
        ("claim of an impossible rank", frame({**hello, "rank": 999}), 0.5),
        ("hello that is a JSON list", frame([1, 2, 3]), 0.5),
        ("hello with rank 'abc'", frame({**hello, "rank": "abc"}), 0.5),
        (
            "hello with a huge shape",
            frame({**hello, "rank": 0, "arrays": [["x", "<f4", [1 << 40, 1 << 40]]]}),
            0.5,
        ),
        ("hello with dtype 5", frame({**hello, "rank": 0, "arrays": [["x", 5, [1]]]}), 0.5),
    ]
    done: list[dict[str, object]] = []

    def attack(what: str, data: bytes, hold: float) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError as e:
            done.append({"what": what, "port": None, "error": str(e)})
            return
        done.append({"what": what, "port": s.getsockname()[1]})
        try:
            s.sendall(data)
            for wait in (0.05, 0.25):  # while the connections are held (the chief may be quick)
                time.sleep(wait)
                peaks.append(peak_kb(addr["pid"]))
            time.sleep(hold)  # holding the connection, as the probe did
        except OSError:
            pass
        s.close()

    peaks: list[int | None] = []
    threads = [threading.Thread(target=attack, args=a) for a in attacks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    known = [p for p in peaks if p is not None]
    print(
        json.dumps({"attempts": done, "chief_peak_kb": max(known) if known else None}), flush=True
    )


def peak_kb(pid: int) -> int | None:
    """The chief's peak resident memory so far (VmHWM), kB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


if __name__ == "__main__":
    main()
