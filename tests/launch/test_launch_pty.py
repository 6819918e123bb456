"""`csrun_cpu python`: an interactive interpreter on one allocated node, on the terminal (srun
--pty). Ctrl-C belongs to the interpreter, not to the launcher."""

from __future__ import annotations

import pexpect
from launch_helpers import HANG_S, queue_state, script


def test_csrun_cpu_python_is_interactive(cs2_home):
    child = pexpect.spawn(script("csrun_cpu"), ["python", "-q"], encoding="utf-8", timeout=HANG_S)
    child.delaybeforesend = None
    try:
        child.expect_exact("Running: srun --pty --nodes=1 --exclude=chief-0 --exclusive")
        child.expect_exact(">>> ")
        child.sendline(
            "import os; print(os.environ['SLURMD_NODENAME'], os.environ['SLURM_NNODES'])"
        )
        child.expect_exact("worker-0 1")
        child.expect_exact(">>> ")
        child.sendintr()  # the interpreter gets it; the job goes on
        child.expect_exact("KeyboardInterrupt")
        child.expect_exact(">>> ")
        child.sendline("raise SystemExit(3)")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 3
    jobs, nodes = queue_state(cs2_home)
    assert nodes == [] and [j["state"] for j in jobs] == ["FAILED"]
