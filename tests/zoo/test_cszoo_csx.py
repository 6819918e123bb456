"""`cszoo fit` with backend CSX: a legacy config converted with `cszoo config convert_legacy`
(device CSX, as Model Zoo writes it) submits compile and execute wsjobs to the cluster
management server as `python run.py CSX` does, and trains with the same losses as the legacy
file through `python run.py CSX`, bit for bit."""

from __future__ import annotations

import re
import sys

import pytest
import yaml

pytestmark = pytest.mark.slow  # whole wsjobs through a cluster server

LOSS = re.compile(r"\| Train Device=[^,]*, Step=(\d+), Loss=([^,\s]+)")


def cszoo(system, model_dir, *argv):
    return system.run(
        [sys.executable, "-m", "cs2sim.scripts.cszoo", *argv],
        cwd=model_dir,
        label="cszoo " + " ".join(argv),
    )


@pytest.mark.parametrize(
    ("model", "config", "steps"),
    [("fc_mnist", "params_small.yaml", "20"), ("gpt2", "params_tiny.yaml", "4")],
)
def test_converted_config_trains_on_the_cluster_with_the_legacy_losses(
    cs2_appliance, model, config, steps
):
    system = cs2_appliance.system
    home = system.model_copy(model)
    legacy = cs2_appliance.run_csx(
        home, "-p", f"configs/{config}", "--mode", "train", "-o", "legacy", "--max_steps", steps
    )
    assert legacy.exit_code == 0, legacy.combined
    conv = cszoo(system, home, "config", "convert_legacy", f"configs/{config}", "-o", "conv")
    assert conv.exit_code == 0, conv.combined
    path = home / "conv" / config.replace(".yaml", "_v2.yaml")
    raw = yaml.safe_load(path.read_text())
    assert raw["trainer"]["init"]["device"] == "CSX"
    raw["trainer"]["init"]["loop"] |= {"max_steps": int(steps)}
    raw["trainer"]["init"]["logging"] = {"log_steps": 1}
    raw["trainer"]["fit"].pop("val_dataloader", None)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    res = cszoo(
        system,
        home,
        "fit",
        str(path.relative_to(home)),
        "-o",
        "trainer",
        "--job_labels",
        "via=cszoo",
    )
    assert res.exit_code == 0, res.combined
    jobs = cs2_appliance.jobs()
    execute = [j for j in jobs if j["meta"]["type"] == "execute"]
    assert len(execute) == 2 and all(j["status"]["phase"] == "SUCCEEDED" for j in execute)
    want = dict(LOSS.findall(legacy.output))
    got = dict(LOSS.findall(res.output))
    assert want and all(got[s] == want[s] for s in want), (want, got)
