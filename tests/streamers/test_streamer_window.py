"""A streamer runs at most the chief's window ahead of the batches the chief has taken: the real
streamer loop (runtime/job/streamers.py) against a chief played over a socket pair, which opens
a session with a window and hands out credit as the real hub does (runtime/job/hub.py)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from cs2sim.runtime.job.channel import check_arrays, recv_arrays, recv_header, send_frame
from cs2sim.runtime.job.streamers import streamer_loop

WINDOW = 3
HANG_S = 300  # a guard against a hang, never a speed requirement (a loaded host is slow)


class Endless:
    """A producer that makes batch g at once, for ever: only the window can hold it back."""

    def __init__(self) -> None:
        self.made = 0

    def batches(
        self, first: int, step: int, stop: Callable[[], bool]
    ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        g = first
        while not stop():
            self.made += 1
            yield g, {"x": np.full((2, 4), g, np.int32)}  # (rows, features)
            g += step


def receive(sock: socket.socket, timeout: float) -> dict[str, Any] | None:
    """The next frame's header (its arrays read and dropped), or None after `timeout` s."""
    sock.settimeout(timeout)
    try:
        header = recv_header(sock)
    except TimeoutError:
        return None
    finally:
        sock.settimeout(None)
    if header.get("arrays"):
        recv_arrays(sock, check_arrays(header))
    return header


def test_a_streamer_sends_its_window_then_one_batch_per_credit_and_stops_at_the_end() -> None:
    chief, streamer = socket.socketpair()
    producer = Endless()
    codes: list[int] = []
    task = threading.Thread(
        target=lambda: codes.append(streamer_loop(streamer, 1, lambda split: producer)),
        daemon=True,
    )
    task.start()
    send_frame(
        chief,
        {"type": "open", "session": 7, "split": "train", "start": 10, "n": 4, "window": WINDOW},
    )
    got = [receive(chief, HANG_S) for _ in range(WINDOW)]
    assert [h and (h["session"], h["g"]) for h in got] == [(7, 11), (7, 15), (7, 19)]
    # the window is full: nothing more until the chief takes a batch (a broken window sends the
    # next one at once, so a quiet second here would be a false pass at worst, never a failure)
    assert receive(chief, 1.0) is None
    send_frame(chief, {"type": "credit", "session": 7, "taken": 2})
    more = [receive(chief, HANG_S) for _ in range(2)]
    assert [h and h["g"] for h in more] == [23, 27]
    assert receive(chief, 1.0) is None
    send_frame(chief, {"type": "credit", "session": 6, "taken": 50})  # an old session's: ignored
    assert receive(chief, 1.0) is None
    send_frame(chief, {"type": "end", "status": 0, "text": ""})
    task.join(HANG_S)
    assert codes == [0]
    assert producer.made <= 2 * WINDOW + 2  # made, at most, what it sent and a few in hand
    chief.close()


def test_an_open_without_a_window_streams_unbounded_as_before() -> None:
    chief, streamer = socket.socketpair()
    task = threading.Thread(
        target=streamer_loop, args=(streamer, 0, lambda split: Endless()), daemon=True
    )
    task.start()
    send_frame(chief, {"type": "open", "session": 1, "split": "eval", "start": 0, "n": 2})
    assert [h and h["g"] for h in (receive(chief, HANG_S) for _ in range(20))] == list(
        range(0, 40, 2)
    )
    send_frame(chief, {"type": "end", "status": 0, "text": ""})
    chief.close()  # a streamer blocked in a send (its buffer full) sees the chief gone
    task.join(HANG_S)
    assert not task.is_alive()
