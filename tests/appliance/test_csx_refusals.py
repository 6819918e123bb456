"""Jobs the cluster can never run are refused before anything is reserved: one sentence naming
the blocker and the admin's fix, exit 69 as csrun_wse's refusal; malformed flags are refused by
the parser (exit 2)."""

from __future__ import annotations

import pytest
from appliance_helpers import TRAIN


def _nothing_reserved(cluster) -> None:
    assert cluster.jobs() == []  # no wsjob, not even a compile job
    assert cluster.system.jobs() == []  # and the scheduler never saw a job


def test_more_systems_than_the_cluster_has(cs2_appliance):
    model = cs2_appliance.system.model_copy("fc_mnist")
    res = cs2_appliance.run_csx(model, *TRAIN, "--num_csx", "5")
    assert res.exit_code == 69, res.combined
    err = res.errors.strip()
    assert err.count("\n") == 0 and "asks for 5 CS-2 systems" in err, err
    assert "cluster has 4 (cs2-1, cs2-2, cs2-3, cs2-4)" in err
    _nothing_reserved(cs2_appliance)


def test_pipeline_on_a_weight_streaming_cluster_names_the_fix(cs2_appliance):
    model = cs2_appliance.system.model_copy("fc_mnist")
    res = cs2_appliance.run_csx(model, "pipeline", *TRAIN)
    assert res.exit_code == 69, res.combined
    err = res.errors.strip()
    assert err.count("\n") == 0 and "PIPELINED" in err and "config execmode setup" in err, err
    _nothing_reserved(cs2_appliance)


@pytest.mark.parametrize("state", ["STANDBY", "FAULT"])
def test_a_system_not_active_blocks_a_job_that_needs_all_four(cs2_appliance, state):
    system = cs2_appliance.system
    from cs2sim.system.machine import Machine
    from cs2sim.system.users import local_identity

    store = system.store
    machine, admin = Machine(store, "cs2-3"), local_identity(store)
    if state == "STANDBY":
        machine.standby(admin)
    else:
        machine.inject_fault(admin, "fabric link down")
    model = system.model_copy("fc_mnist")
    res = cs2_appliance.run_csx(model, *TRAIN, "--num_csx", "4")
    assert res.exit_code == 69, res.combined
    err = res.errors.strip()
    assert err.count("\n") == 0 and f"cs2-3 is in {state}" in err, err
    _nothing_reserved(cs2_appliance)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--mode", "train", "--bogus"], "unrecognized arguments: --bogus"),
        (["--mode", "train", "--num_csx", "two"], "invalid"),
        (["--mode", "train", "--job_priority", "p9"], "invalid choice: 'p9'"),
        (["--mode", "train", "--job_labels", "novalue"], "invalid label"),
        (["--mode", "train", "--compile_only", "--validate_only"], "not allowed with"),
        (["--mode", "fly"], "invalid choice: 'fly'"),
    ],
)
def test_malformed_flags_are_refused_as_argparse_does(cs2_appliance, argv, says):
    model = cs2_appliance.system.model_copy("fc_mnist")
    res = cs2_appliance.run_csx(model, *argv)
    assert res.exit_code == 2 and says in res.errors, res.combined
    assert res.errors.startswith("usage: run.py CSX")
