"""runtime/threads.py: the wait settings are in force from start-up, BLAS runs one thread per
call while the runtime's own workers share out chunks (every chunk once, errors passed on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from cs2sim.runtime import threads

ROOT = Path(__file__).resolve().parents[2]


def child(code: str, **env: str) -> dict:
    """Run `code` in a fresh interpreter (the user's environment minus our variables, plus
    `env`); it prints one JSON line, returned parsed."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in threads.SPIN_ENV and k not in threads.USER_COUNT_ENV
    }
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**base, **env},
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def blas_count() -> int:
    """Threads of numpy's BLAS (another library may bring its own OpenBLAS)."""
    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    mine = [i for i in blas if "numpy" in i["filepath"]] or blas
    return max(i["num_threads"] for i in mine)


def test_importing_the_runtime_sets_the_wait_settings_before_numpy_loads() -> None:
    # what a run.py does: `from cs2sim.runtime.cli.main import main` imports runtime before numpy
    out = child(
        "import json, os, sys\n"
        "import cs2sim.runtime\n"
        "loaded = 'numpy' in sys.modules\n"
        "from cs2sim.runtime import registry\n"
        "from cs2sim.runtime.numerics.precision import Policy\n"
        "from cs2sim.runtime import threads\n"
        "assert threads.settings() is None\n"
        "registry.get('fc_mnist')({'hidden_sizes': [4]}, Policy('float32'), seed=1)\n"
        "s = threads.settings()\n"
        "print(json.dumps({'numpy_before': loaded, 'env': {k: os.environ.get(k) for k in "
        "threads.SPIN_ENV}, 'in_time': s.wait_in_time, 'threads': s.workers, 'blas': "
        "[i['num_threads'] for i in __import__('threadpoolctl').threadpool_info() "
        "if i['user_api'] == 'blas'], "
        "'libs': s.libraries, 'line': s.describe()}))"
    )
    assert out["numpy_before"] is False
    assert out["env"] == threads.SPIN_ENV  # all three, as documented
    assert out["in_time"] is True  # building the model recorded them as in force
    assert out["threads"] >= 1 and any("openblas" in lib for lib in out["libs"])
    assert out["blas"] == [1]  # BLAS single-threaded: the runtime's workers split the work
    assert "OPENBLAS_THREAD_TIMEOUT=4" in out["line"]


def test_the_users_own_values_win() -> None:
    out = child(
        "import json, os\n"
        "import cs2sim.runtime\n"
        "print(json.dumps({k: os.environ.get(k) for k in ('OMP_WAIT_POLICY', "
        "'OPENBLAS_THREAD_TIMEOUT')}))",
        OMP_WAIT_POLICY="ACTIVE",
    )
    assert out == {"OMP_WAIT_POLICY": "ACTIVE", "OPENBLAS_THREAD_TIMEOUT": "4"}


def test_cs2sim_blas_threads_sets_the_worker_count_at_start_up() -> None:
    out = child(
        "import json\n"
        "import cs2sim.runtime\n"
        "from cs2sim.runtime import threads\n"
        "from threadpoolctl import threadpool_info\n"
        "s = threads.configure()\n"
        "n = [i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas']\n"
        "print(json.dumps({'workers': s.workers, 'lib': n, 'who': s.user_count}))",
        CS2SIM_BLAS_THREADS="3",
    )
    assert out == {"workers": 3, "lib": [1], "who": "CS2SIM_BLAS_THREADS"}


def test_idle_blas_workers_sleep_instead_of_spinning() -> None:
    """Between matmuls a spinning OpenBLAS worker burns CPU for up to ~0.1 s; with the runtime's
    OPENBLAS_THREAD_TIMEOUT it sleeps at once. CPU time is measured only across the pauses."""
    code = (
        "import json, time\n"
        "import cs2sim.runtime\n"
        "import numpy as np\n"
        "from threadpoolctl import threadpool_limits\n"
        "a = np.ones((512, 512), np.float32)\n"
        "spent = 0.0\n"
        "with threadpool_limits(2):\n"
        "    for _ in range(10):\n"
        "        a @ a\n"
        "        c0 = time.process_time(); time.sleep(0.03); spent += time.process_time() - c0\n"
        "print(json.dumps({'cpu_in_pauses': spent}))"
    )
    out = child(code)
    # 10 pauses of 0.03 s: a spinning worker would use ~0.3 s of CPU in them; a sleeping one ~0
    assert out["cpu_in_pauses"] < 0.1, out


def test_run_chunks_runs_every_chunk_once_on_several_threads() -> None:
    import threading
    import time

    threads.set_workers(2)
    try:
        seen: list[tuple[int, str]] = []

        def fn(i: int) -> None:
            time.sleep(0.002)  # long enough for the helper thread to take some
            seen.append((i, threading.current_thread().name))

        threads.run_chunks(fn, 20)
        assert sorted(i for i, _ in seen) == list(range(20))
        assert len({name for _, name in seen}) == 2  # the caller and one helper
    finally:
        threads.set_workers(threads.available_cores())


def test_run_chunks_passes_an_error_on() -> None:
    threads.set_workers(2)
    try:

        def fn(i: int) -> None:
            if i == 3:
                raise ValueError("chunk 3")

        try:
            threads.run_chunks(fn, 8)
        except ValueError as e:
            assert str(e) == "chunk 3"
        else:
            raise AssertionError("the chunk's error was lost")
    finally:
        threads.set_workers(threads.available_cores())


def test_single_threaded_blas_undoes_an_outer_change() -> None:
    with threadpool_limits(2):
        threads.single_threaded_blas()
        assert blas_count() == 1


def test_set_env_defaults_on_a_given_mapping() -> None:
    env = {"KMP_BLOCKTIME": "200"}
    done = threads.set_env_defaults(env)
    assert env["KMP_BLOCKTIME"] == "200" and "KMP_BLOCKTIME" not in done
    assert done == {k: v for k, v in threads.SPIN_ENV.items() if k != "KMP_BLOCKTIME"}
    assert np.float32  # numpy imported in this process: the mapping form touches nothing else


def test_a_chunk_may_split_its_own_work_without_deadlock() -> None:
    threads.set_workers(2)
    try:
        done: list[tuple[int, int]] = []

        def inner(i: int) -> None:
            threads.run_chunks(lambda j: done.append((i, j)), 3)

        threads.run_chunks(inner, 4)
        assert sorted(done) == [(i, j) for i in range(4) for j in range(3)]
    finally:
        threads.set_workers(threads.available_cores())


def test_inside_a_chunk_a_kernel_runs_whole_on_its_thread() -> None:
    """A chunk's own kernels (a pipelined stage beside another) see one worker: a product runs
    as one BLAS call, not cut into blocks for threads that are busy elsewhere; outside a chunk
    the configured count is back, and the numbers are the same bits either way."""
    from cs2sim.runtime.nn import parallel

    threads.set_workers(2)
    try:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((512, 256), dtype=np.float32)
        b = rng.standard_normal((256, 512), dtype=np.float32)
        seen: list[tuple[int, int]] = []
        outs = [np.empty((512, 512), np.float32) for _ in range(2)]

        def chunk(i: int) -> None:
            seen.append(
                (threads.workers(), len(parallel._blocks(a, b, outs[i], None, threads.workers())))
            )
            parallel.gemm(a, b, outs[i])

        threads.run_chunks(chunk, 2)
        assert seen == [(1, 1), (1, 1)]
        assert threads.workers() == 2 and len(parallel._blocks(a, b, outs[0], None, 2)) == 2
        whole = parallel.gemm(a, b, np.empty((512, 512), np.float32))  # split over 2 threads
        assert all(np.array_equal(o, whole) for o in outs)
    finally:
        threads.set_workers(threads.available_cores())


def test_run_chunks_names_each_thread_by_one_slot() -> None:
    import threading
    import time

    threads.set_workers(2)
    try:
        slot_of: dict[str, set[int]] = {}

        def fn(i: int, slot: int) -> None:
            time.sleep(0.002)
            slot_of.setdefault(threading.current_thread().name, set()).add(slot)

        threads.run_chunks(fn, 12, slots=True)
        assert all(len(s) == 1 for s in slot_of.values())  # a thread keeps its slot
        assert set().union(*slot_of.values()) <= {0, 1}
        assert len({min(s) for s in slot_of.values()}) == len(slot_of)  # no slot shared
    finally:
        threads.set_workers(threads.available_cores())


def test_two_threads_may_split_work_at_once() -> None:
    """Executors may run layers from several threads: each caller's chunks all run, and a caller
    never waits for the other's work."""
    import threading

    threads.set_workers(2)
    try:
        results: dict[str, list[int]] = {"a": [], "b": []}

        def caller(name: str) -> None:
            for _ in range(20):
                threads.run_chunks(lambda i: results[name].append(i), 4)

        ts = [threading.Thread(target=caller, args=(n,)) for n in results]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=60)
        assert sorted(results["a"]) == sorted(results["b"]) == sorted(list(range(4)) * 20)
    finally:
        threads.set_workers(threads.available_cores())


def test_helpers_handle_float_errors_as_their_caller_does() -> None:
    """numpy's error handling is per thread: a helper must not warn where its caller ignores."""
    import warnings

    threads.set_workers(2)
    try:
        x = np.full((64, 1000), 1e30, np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # any RuntimeWarning from any thread fails
            with np.errstate(all="ignore"):
                threads.run_chunks(lambda i: np.multiply(x[i * 8 : (i + 1) * 8], 1e30), 8)
    finally:
        threads.set_workers(threads.available_cores())
