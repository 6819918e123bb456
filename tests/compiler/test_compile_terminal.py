"""On a terminal: the compile's stages are drawn as they run, then the wafer map (pexpect)."""

from __future__ import annotations

import os
import re
import sys

from cs2sim.runtime.cli.main import model_home


def test_compile_on_a_terminal_shows_stages_and_the_wafer_map(tmp_path):
    import pexpect

    child = pexpect.spawn(
        sys.executable,
        ["run.py", "--mode=compile_only", "-o", str(tmp_path)],
        cwd=str(model_home("fc_mnist")),
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 120),
        env={**os.environ, "TERM": "xterm", "CS2SIM_FLOW": ""},
    )
    child.expect(pexpect.EOF)
    child.close()
    raw = child.before
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", raw)  # drop the terminal codes
    assert child.exitstatus == 0, text
    assert "Placing kernels on the wafer" in text and "3/6" in text  # progress, as it went
    assert "Compile stage" not in text  # no plain stage lines on a terminal
    assert "Estimated performance (CS-2 estimate" in text
    # the map: coloured cells and the legend (layer, kernels, PEs, share)
    assert "█" in text and re.search(r"\x1b\[(3[0-8]|9[0-7])[;m]", raw)  # coloured
    for col in ("layer", "kernels", "PEs", "share", "fc0", "logits"):
        assert col in text
    assert "Traceback" not in text
