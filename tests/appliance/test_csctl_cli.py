"""csctl's command line: help, types, the cluster's views, and its one-line errors."""

from __future__ import annotations


def test_help_types_and_cluster_views(cs2_appliance):
    top = cs2_appliance.csctl("-h").check().output
    assert top.startswith("usage: csctl") and "Cerebras cluster command line tool." in top
    for command in ("get", "cancel", "label", "log-export", "types", "config"):
        assert command in top
    assert "--my-jobs" in cs2_appliance.csctl("get", "-h").check().output
    assert "--compile-artifacts" in cs2_appliance.csctl("log-export", "-h").check().output
    types = cs2_appliance.csctl("types").check().output.split()
    assert {"jobs", "cluster", "system", "nodegroup", "version"} <= set(types)
    systems = cs2_appliance.csctl("get", "system").check().output.splitlines()
    assert systems[0].split()[:4] == ["NAME", "IP", "STATE", "MODE"]
    assert [r.split()[0] for r in systems[1:]] == ["cs2-1", "cs2-2", "cs2-3", "cs2-4"]
    assert "cluster-server" in cs2_appliance.csctl("get", "version").check().output
    assert "worker" in cs2_appliance.csctl("get", "nodegroups").check().output
    assert "(none: the local server" in cs2_appliance.csctl("config", "view").check().output


def test_errors_are_one_line(cs2_appliance):
    for argv, text in (
        (
            ["get"],
            "missing required argument TYPE. Run 'csctl types' to see available resource types",
        ),
        (
            ["get", "jobs", "--sort", "size"],
            "invalid sort type: size, allowed types: [priority, age]",
        ),
        (["cancel", "job", "wsjob-nosuchjob"], "no job 'wsjob-nosuchjob'"),
        (["label", "job", "x", "=="], "invalid label"),
    ):
        res = cs2_appliance.csctl(*argv)
        assert res.exit_code == 1 and res.errors.count("\n") == 1 and text in res.errors, (
            argv,
            res.errors,
        )
