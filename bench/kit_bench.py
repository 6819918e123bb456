"""Testing-kit speed: fixture set-up/tear-down; 100 tests driving a console through a mode change.

    python bench/kit_bench.py [--tests 100]

Host measurements on this machine (median and p90 over the runs). Two figures:
1. in process: ThrowawaySystem() + console() ready, the Weight Streaming Quickstart's mode change
typed at the console
   (standby + yes, setup + menu choice 2, activate), exit, close; per phase;
2. through pytest: a generated test file with N such tests using the `cs2_console` fixture,
   run as a user would (`pytest -q`): total wall time and per-test time.
Results are appended to bench/results/kit.md with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cs2sim.scripts.testkit import ThrowawaySystem

TEST_FILE = """
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_mode_change(cs2_console, cs2_system, i):
    cs2_console.send("system standby")
    cs2_console.answer("yes")
    cs2_console.send("config execmode setup")
    cs2_console.answer("2")
    assert "Weight Streaming" in cs2_console.run("system activate")
    assert cs2_system.active_mode == "WEIGHT_STREAMING"
"""


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def in_process(n: int) -> dict[str, list[float]]:
    phases: dict[str, list[float]] = {"set-up": [], "mode change": [], "tear-down": []}
    for _ in range(n):
        t0 = time.perf_counter()
        system = ThrowawaySystem()
        console = system.console()
        t1 = time.perf_counter()
        console.run("system standby", "yes")
        console.run("config execmode setup", "2")
        console.run("system activate")
        assert console.exit() == 0
        t2 = time.perf_counter()
        system.close()
        t3 = time.perf_counter()
        phases["set-up"].append(t1 - t0)
        phases["mode change"].append(t2 - t1)
        phases["tear-down"].append(t3 - t2)
    return phases


def through_pytest(n: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "test_kit_bench.py"
        path.write_text(TEST_FILE.format(n=n))
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"the generated suite failed:\n{proc.stdout[-3000:]}")
    return wall, n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tests", type=int, default=100)
    args = p.parse_args()
    load = os.getloadavg()
    rows = []
    phases = in_process(args.tests)
    for name, values in phases.items():
        rows.append(
            f"| in process: {name} | {statistics.median(values) * 1000:.0f} ms | "
            f"{pct(values, 0.9) * 1000:.0f} ms |"
        )
    wall, n = through_pytest(args.tests)
    rows.append(f"| pytest, {n} tests (`cs2_console` + mode change): total | {wall:.1f} s | |")
    rows.append(f"| pytest: per test (total / {n}) | {wall / n * 1000:.0f} ms | |")
    table = "\n".join(["| what (host measurement) | median | p90 |", "|---|---|---|", *rows])
    print(table)
    print(f"load average at start: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    out = Path(__file__).parent / "results" / "kit.md"
    with out.open("a") as f:
        f.write(
            f"\n## {time.strftime('%Y-%m-%d %H:%M')} (load {load[0]:.1f}), "
            f"`python bench/kit_bench.py --tests {args.tests}`\n\n{table}\n"
        )


if __name__ == "__main__":
    main()
