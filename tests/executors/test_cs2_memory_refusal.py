"""A CS-2-sized config refused for this machine's memory says what to do instead, and a run on
the simulated CS-2 speaks of the simulated CS-2, never of training on the host."""

from __future__ import annotations

from cs2sim.runtime.cli.main import main, model_home

GPTJ_6B = str(model_home("gptj") / "configs" / "params_gptj_6b.yaml")


def test_cs2_run_of_the_6b_config_speaks_of_the_simulated_cs2(capsys, tmp_path):
    md = tmp_path / "md"
    code = main("gptj", ["-m", "train", "-p", GPTJ_6B, "-o", str(md), "--cs_ip", "cs2-1"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("error: Training gptj (6.") and "on the simulated CS-2 needs" in err
    assert "on the host" not in err and "compile it instead (--mode compile_only" in err
    assert "configs/params_continuous_pretraining.yaml on the simulated CS-2" in err
    assert not md.exists()


def test_host_refusal_says_compile_it_or_run_a_stand_in(capsys, tmp_path):
    code = main("gptj", ["-m", "train", "-p", GPTJ_6B, "-o", str(tmp_path / "md")])
    err = capsys.readouterr().err
    assert code == 1 and "on the host needs" in err
    assert "compile it for the CS-2 instead (--mode compile_only)" in err
    assert "cannot compile" not in err
