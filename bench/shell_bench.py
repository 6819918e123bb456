"""Benchmark the cs> shell the way a user's pexpect script sees it (a benchmark, not a test).

Measures, with a plain `pexpect.spawn` and no special environment variables:
  1. spawn of the installed `cs` script -> the `cs>` prompt is visible (process start, imports,
     store open, first render);
  2. the round trip of `config execmode show` (send the line -> its output and the next prompt);
  3. the import time of `cs -c "config execmode show"` (python -X importtime, top entries);
  4. `audit show --since 1h` over an audit log of --audit-rows rows (default 100,000, spread
     over 30 days): the query in-process, and `cs -c` end to end;
  5. against a bare prompt_toolkit `PromptSession("cs> ")` that answers the same line with the
     same text (the floor any prompt_toolkit console starts from): spawn to the first prompt
     and the round trip, in interleaved rounds (cs, bare, cs, bare, ...), as ratios cs / bare
     with their range over the rounds;
  6. `audit show --all | count` over --stream-rows rows (default 100,000) as the text table
     against the same rows as JSON (`--output-format=json | count`), interleaved rounds: wall
     time and the child's own peak RSS (wait4), as ratios text / JSON.
Targets (on the 2-core machine): prompt within 0.3 s, round trip median under 10 ms, the audit
query under 0.2 s, the text table within 2x of JSON in time and memory.

    python bench/shell_bench.py [--runs 30] [--round-trips 10] [--audit-rows 100000]
        [--compare-rounds 10] [--stream-rows 100000] [--stream-rounds 3]

All figures are host measurements of this machine at the time of the run.

Bytecode: a normal install writes `__pycache__` on first use, so a user's second `cs` starts
from cached bytecode. This sandbox sets PYTHONDONTWRITEBYTECODE=1, which makes every start
recompile the project's sources (~25 ms). The bench therefore reports two environments: the
inherited one as is, and the same with bytecode cached in a temporary PYTHONPYCACHEPREFIX (the
normal case; the targets apply to it). Neither sets anything that changes the shell's behaviour.
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

import pexpect

# What a user runs: the `cs` console script installed next to this Python (a venv's bin/cs),
# else the module. Python is named explicitly so `-X importtime` can be added for the profile.
_SCRIPT = Path(sys.executable).with_name("cs")
CMD = (
    [sys.executable, str(_SCRIPT)]
    if _SCRIPT.is_file()
    else [sys.executable, "-m", "cs2sim.csshell"]
)
SHOW = "config execmode show"
EXPECTED = "Configured Execution Mode : PIPELINED"


def spawn(env: dict[str, str]) -> tuple[pexpect.spawn, float, float | None]:
    """Start the shell; return it, the seconds until `cs>` was visible, and the CPU seconds
    the shell process had used by then (None where /proc is missing)."""
    start = time.perf_counter()
    child = pexpect.spawn(
        CMD[0], CMD[1:], env=env, encoding="utf-8", timeout=10, dimensions=(24, 120)
    )
    child.delaybeforesend = None
    try:
        child.expect_exact("cs>")
    except (pexpect.EOF, pexpect.TIMEOUT) as e:
        raise SystemExit(
            f"cs did not show its prompt ({type(e).__name__}): {child.before!r}"
        ) from None
    return child, time.perf_counter() - start, cpu_seconds(child.pid)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of `pid` so far, from /proc (Linux); None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def round_trip(child: pexpect.spawn) -> float:
    """Seconds from sending `config execmode show` to its output plus the next prompt."""
    start = time.perf_counter()
    child.sendline(SHOW)
    child.expect_exact(EXPECTED)
    child.expect_exact("cs>")
    return time.perf_counter() - start


def summary(name: str, values: list[float], unit: str, scale: float) -> str:
    """`name: median X (min .., max .., p90 ..) over N`."""
    q = sorted(values)
    p90 = q[min(len(q) - 1, int(0.9 * len(q)))]
    fmt = (lambda v: f"{v * scale:.1f}") if scale > 1 else (lambda v: f"{v * scale:.3f}")
    return (
        f"{name}: median {fmt(statistics.median(q))} {unit} (min {fmt(q[0])}, "
        f"p90 {fmt(p90)}, max {fmt(q[-1])}; n={len(q)}) [host measurement]"
    )


def import_profile(env: dict[str, str], top: int = 8) -> list[str]:
    """The slowest cumulative imports of a non-interactive run (microseconds)."""
    proc = subprocess.run(
        [*CMD[:1], "-X", "importtime", *CMD[1:], "-c", SHOW],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
            if cumulative.isdigit():
                rows.append((int(cumulative), name))
    rows.sort(reverse=True)
    return [f"  {us / 1000:7.1f} ms  {name}" for us, name in rows[:top]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=30, help="shells to spawn")
    p.add_argument("--round-trips", type=int, default=10, help="commands per shell")
    p.add_argument(
        "--audit-rows",
        type=int,
        default=100_000,
        help="audit rows for the `audit show --since 1h` figure (0: skip it)",
    )
    p.add_argument(
        "--compare-rounds", type=int, default=10, help="rounds of cs vs a bare PromptSession"
    )
    p.add_argument(
        "--stream-rows", type=int, default=100_000, help="audit rows for text vs JSON (0: skip)"
    )
    p.add_argument("--stream-rounds", type=int, default=3, help="rounds of text vs JSON")
    p.add_argument(
        "--only",
        choices=("all", "compare", "stream"),
        default="all",
        help="run only the bare-PromptSession comparison or the text-vs-JSON figure",
    )
    args = p.parse_args(argv)
    if args.only == "compare":
        print("\n".join(compare_bare(args.compare_rounds, args.round_trips)))
        return 0
    if args.only == "stream":
        print("\n".join(stream_bench(args.stream_rows, args.stream_rounds)))
        return 0
    with (
        tempfile.TemporaryDirectory(prefix="cs2bench-") as home,
        tempfile.TemporaryDirectory(prefix="cs2bench-pyc-") as pyc,
    ):
        inherited = dict(os.environ, CS2_HOME=home)
        inherited.pop("PROMPT_TOOLKIT_NO_CPR", None)  # a user's script sets nothing; neither do we
        cached = dict(inherited, PYTHONPYCACHEPREFIX=pyc)
        cached.pop("PYTHONDONTWRITEBYTECODE", None)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"cs> shell benchmark: {' '.join(CMD)} (CS2_HOME={home}), {os.cpu_count()} CPUs, "
            f"{args.runs} shells x {args.round_trips} commands; load average {load:.2f} at start"
        )
        for label, env in (
            ("bytecode cached (normal install)", cached),
            ("inherited environment as is", inherited),
        ):
            for _ in range(2):  # warm up: create the store, write the bytecode cache
                subprocess.run([*CMD, "-c", SHOW], env=env, check=True, capture_output=True)
            prompts, trips, cpus = measure(env, args.runs, args.round_trips)
            note = (
                ""
                if env.get("PYTHONDONTWRITEBYTECODE") != "1"
                else (" (PYTHONDONTWRITEBYTECODE=1: sources recompiled at every start)")
            )
            print(f"\n[{label}]{note}")
            print(summary("prompt visible", prompts, "s", 1.0) + "   target < 0.3 s")
            if cpus:  # steadier than wall time when other work shares the CPUs
                print(summary("CPU time used by cs until its prompt", cpus, "s", 1.0))
            print(summary(f"round trip `{SHOW}`", trips, "ms", 1000.0) + "   target median < 10 ms")
        if hasattr(os, "getloadavg"):
            print(f"\nload average {os.getloadavg()[0]:.2f} at the end (2.0 = both CPUs busy)")
        print(f'\nslowest imports of `cs -c "{SHOW}"` (cumulative, bytecode cached):')
        print("\n".join(import_profile(cached)))
    if args.audit_rows:
        print()
        print("\n".join(audit_query_bench(args.audit_rows)))
    if args.compare_rounds:
        print()
        print("\n".join(compare_bare(args.compare_rounds, args.round_trips)))
    if args.stream_rows:
        print()
        print("\n".join(stream_bench(args.stream_rows, args.stream_rounds)))
    return 0


# A bare prompt_toolkit console: the same prompt, the same answer to the same line. What cs adds
# on top of it (store, toolbar, completion, history) is what the ratio measures.
BARE = f"""
from prompt_toolkit import PromptSession
session = PromptSession("cs> ")
while True:
    try:
        line = session.prompt()
    except EOFError:
        break
    if line == {SHOW!r}:
        print({EXPECTED!r})
"""


def _trip(child: pexpect.spawn) -> float:
    start = time.perf_counter()
    child.sendline(SHOW)
    child.expect_exact(EXPECTED)
    child.expect_exact("cs>")  # the bare prompt writes `cs>` and a cursor move, not the space
    return time.perf_counter() - start


def _session(argv: list[str], env: dict[str, str], trips: int) -> tuple[float, list[float]]:
    """Spawn `argv` under pexpect: seconds to its first `cs>`, and `trips` round trips."""
    start = time.perf_counter()
    child = pexpect.spawn(argv[0], argv[1:], env=env, encoding="utf-8", timeout=30)
    child.delaybeforesend = None
    child.expect_exact("cs>")
    first = time.perf_counter() - start
    times = [_trip(child) for _ in range(trips)]
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    return first, times


def _ratio_line(
    name: str,
    ours: list[float],
    bare: list[float],
    unit: str,
    scale: float,
    labels: tuple[str, str] = ("cs", "bare"),
) -> str:
    a, b = labels
    ratios = sorted(x / y for x, y in zip(ours, bare, strict=True))
    return (
        f"  {name}: {a} median {statistics.median(ours) * scale:.1f} {unit}, {b} "
        f"{statistics.median(bare) * scale:.1f} {unit}; {a} / {b} median "
        f"{statistics.median(ratios):.2f}x [{ratios[0]:.2f}-{ratios[-1]:.2f}] over "
        f"{len(ratios)} rounds [host measurement]"
    )


def compare_bare(rounds: int, trips: int) -> list[str]:
    """cs against a bare PromptSession: interleaved rounds, one shell of each per round."""
    with (
        tempfile.TemporaryDirectory(prefix="cs2bench-") as home,
        tempfile.TemporaryDirectory(prefix="cs2bench-pyc-") as pyc,
    ):
        env = dict(os.environ, CS2_HOME=home, PYTHONPYCACHEPREFIX=pyc, TERM="xterm-256color")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("PROMPT_TOOLKIT_NO_CPR", None)
        # the bare session with CPR off too (cs switches it off in its own output): otherwise
        # every one of its prompts waits a second for the reply pexpect never sends
        bare_env = dict(env, PROMPT_TOOLKIT_NO_CPR="1")
        bare_script = Path(home) / "bare_prompt.py"
        bare_script.write_text(BARE)
        bare = [sys.executable, str(bare_script)]
        _session(CMD, env, 1)  # warm the bytecode cache and the store
        _session(bare, bare_env, 1)
        first_cs, first_bare, trip_cs, trip_bare = [], [], [], []
        for _ in range(rounds):
            a, ta = _session(CMD, env, trips)
            b, tb = _session(bare, bare_env, trips)
            first_cs.append(a)
            first_bare.append(b)
            trip_cs.append(statistics.median(ta))
            trip_bare.append(statistics.median(tb))
    return [
        f"cs vs a bare PromptSession (TERM=xterm-256color, the bare one with "
        f"PROMPT_TOOLKIT_NO_CPR=1; {trips} round trips per shell; load average "
        f"{os.getloadavg()[0]:.1f}):",
        _ratio_line("spawn to first `cs>`", first_cs, first_bare, "s", 1.0),
        _ratio_line(f"round trip `{SHOW}` (median per shell)", trip_cs, trip_bare, "ms", 1000.0),
    ]


def _run_measured(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run `argv` to its end: wall seconds, its own peak RSS in MB (wait4), its stdout."""
    with tempfile.TemporaryFile("w+") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}")
        return seconds, usage.ru_maxrss / 1024, out.read().strip()


def stream_bench(rows: int, rounds: int) -> list[str]:
    """`audit show --all | count` as the text table vs as JSON, interleaved rounds."""
    from cs2sim.system import audit
    from cs2sim.system.store import Store

    text_line = "audit show --all | count"
    json_line = "audit show --all --output-format=json | count"
    with tempfile.TemporaryDirectory(prefix="cs2bench-stream-") as home:
        now = time.time()
        with Store.open(Path(home)) as store, store.transaction() as db:
            for i in range(rows):
                audit.record(
                    db,
                    user=("root", "alice", "bob")[i % 3],
                    command=("system standby", "system activate", "config execmode setup")[i % 3],
                    system="cs2-1",
                    detail=f"detail text number {i}",
                    at=now - rows + i,
                )
        env = dict(os.environ, CS2_HOME=home)
        text_t, text_m, json_t, json_m = [], [], [], []
        said = ""
        for _ in range(rounds):
            t, m, said = _run_measured([*CMD, "-c", text_line], env)
            text_t.append(t)
            text_m.append(m)
            t, m, _ = _run_measured([*CMD, "-c", json_line], env)
            json_t.append(t)
            json_m.append(m)
    return [
        f"`{text_line}` (text table) vs `{json_line}` over {rows:,} rows ({said}; load "
        f"average {os.getloadavg()[0]:.1f}):",
        _ratio_line("wall time", text_t, json_t, "s", 1.0, ("text", "JSON")) + "   target <= 2x",
        _ratio_line("peak RSS", text_m, json_m, "MB", 1.0, ("text", "JSON")) + "   target <= 2x",
    ]


AUDIT_QUERY = "audit show --since 1h"


def audit_query_bench(rows: int, repeats: int = 7) -> list[str]:
    """`audit show --since 1h` over `rows` audit rows spread evenly over 30 days (so the last
    hour holds rows / 720 of them): the query alone, in-process, and `cs -c` end to end."""
    from cs2sim.system import audit
    from cs2sim.system.store import Store

    with tempfile.TemporaryDirectory(prefix="cs2bench-audit-") as home:
        now = time.time()
        span = 30 * 86400.0
        users = ("root", "alice", "bob")
        commands = ("system standby", "system activate", "config execmode setup")
        with Store.open(Path(home)) as store:
            with store.transaction() as db:
                for i in range(rows):
                    audit.record(
                        db,
                        user=users[i % 3],
                        command=commands[i % 3],
                        system="cs2-1",
                        outcome="ok",
                        at=now - span + i * span / rows,
                    )
            query = audit.AuditQuery(since=now - 3600, system="cs2-1", last=None)
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                found, total = audit.query(store, query)
                times.append(time.perf_counter() - start)
        env = dict(os.environ, CS2_HOME=home)
        ends = []
        for _ in range(3):
            start = time.perf_counter()
            proc = subprocess.run(
                [*CMD, "-c", f"{AUDIT_QUERY} --all | count"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            ends.append(time.perf_counter() - start)
    return [
        f"`{AUDIT_QUERY}` over {rows:,} audit rows ({total:,} in the last hour):",
        summary("  the query (system/audit.py query, in-process)", times, "ms", 1000.0)
        + "   target < 200 ms",
        summary(f'  `cs -c "{AUDIT_QUERY} --all | count"` end to end', ends, "s", 1.0)
        + f"   ({proc.stdout.strip()})",
    ]


def measure(
    env: dict[str, str], runs: int, per_shell: int
) -> tuple[list[float], list[float], list[float]]:
    """Spawn `runs` shells; return prompt-visible seconds, all round-trip seconds, and the CPU
    seconds each shell had used when its prompt appeared."""
    prompts: list[float] = []
    trips: list[float] = []
    cpus: list[float] = []
    for _ in range(runs):
        child, seconds, cpu = spawn(env)
        prompts.append(seconds)
        if cpu is not None:
            cpus.append(cpu)
        for _ in range(per_shell):
            trips.append(round_trip(child))
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
    return prompts, trips, cpus


if __name__ == "__main__":
    sys.exit(main())
