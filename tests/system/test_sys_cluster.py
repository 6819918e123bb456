"""Cluster description (YAML, validation, sync into the store) and the hardware facts."""

from __future__ import annotations

import os

import pytest

from cs2sim.system.cluster import DEFAULT_PATH, cluster_source, load_cluster
from cs2sim.system.errors import ConfigError
from cs2sim.system.hardware import WSE2, WaferSpec
from cs2sim.system.machine import Machine, list_systems
from cs2sim.system.state import ExecMode, State

TWO_SYSTEMS = """
systems:
  - {name: cs2-1, ip: 127.0.1.1}
  - {name: cs2-2, ip: 127.0.1.2, execmode: weight-streaming}
nodes:
  - {name: chief, cpus: 4, memory_gb: 8, role: chief}
  - {name: w, count: 3, cpus: 2, memory_gb: 4.5, role: worker}
memoryx: {capacity_tb: 12}
"""


def test_default_cluster():
    c = load_cluster(DEFAULT_PATH)
    assert [(s.name, s.ip, s.model, s.execmode) for s in c.systems] == [
        ("cs2-1", "127.0.1.1", "CS-2", ExecMode.PIPELINED)
    ]
    assert c.nodes[0].role == "chief" and {n.role for n in c.nodes} == {"chief", "worker"}
    assert len({n.name for n in c.nodes}) == len(c.nodes)
    assert c.memoryx.capacity_tb == 4 and c.swarmx.max_systems == 192


def test_source_order(cs2_home, tmp_path, monkeypatch):
    assert cluster_source(cs2_home) == DEFAULT_PATH
    cs2_home.mkdir()
    (cs2_home / "cluster.yaml").write_text(TWO_SYSTEMS)
    assert cluster_source(cs2_home) == cs2_home / "cluster.yaml"
    other = tmp_path / "other.yaml"
    other.write_text(TWO_SYSTEMS)
    monkeypatch.setenv("CS2_CLUSTER", str(other))
    assert cluster_source(cs2_home) == other
    monkeypatch.setenv("CS2_CLUSTER", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="CS2_CLUSTER names .*missing.yaml"):
        cluster_source(cs2_home)


def test_count_expands_nodes(tmp_path):
    (tmp_path / "c.yaml").write_text(TWO_SYSTEMS)
    c = load_cluster(tmp_path / "c.yaml")
    assert [n.name for n in c.nodes] == ["chief", "w-0", "w-1", "w-2"]
    assert c.nodes[1].memory_gb == 4.5 and c.memoryx.capacity_tb == 12.0
    assert c.systems[1].execmode is ExecMode.WEIGHT_STREAMING


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("nodes: []", "`systems` is missing"),
        ("systems: []", "`systems` must list at least one system"),
        (
            "systems: [{name: a, ip: 999.1.1.1}]",
            "`systems[0].ip` is '999.1.1.1', not an IP address",
        ),
        ("systems: [{name: a, ip: 127.0.0.1, ipp: 1}]", "`systems[0].ipp` is not a known key"),
        (
            "systems: [{name: a, ip: 127.0.0.1}, {name: a, ip: 127.0.0.2}]",
            "`systems` names 'a' twice",
        ),
        ("systems: [{name: a, ip: 127.0.0.1, model: CS-9}]", "`systems[0].model` is 'CS-9'"),
        (
            "systems: [{name: a, ip: 127.0.0.1, execmode: turbo}]",
            "`systems[0].execmode` is 'turbo'",
        ),
        (
            "systems: [{name: a, ip: 127.0.0.1}]\n"
            "nodes: [{name: n, cpus: four, memory_gb: 1, role: worker}]",
            "`nodes[0].cpus` must be an integer (got 'four')",
        ),
        (
            "systems: [{name: a, ip: 127.0.0.1}]\n"
            "nodes: [{name: n, cpus: 1, memory_gb: 1, role: boss}]",
            "`nodes[0].role` is 'boss'",
        ),
        (
            "systems: [{name: a, ip: 127.0.0.1}]\nmemoryx: {capacity_tb: 1}",
            "`memoryx.capacity_tb` is 1; it must be between 4 and 2400",
        ),
        (
            "systems: [{name: a, ip: 127.0.0.1}]\nswarmx: {max_systems: 500}",
            "`swarmx.max_systems` is 500",
        ),
        ("- just a list", "must be a mapping"),
    ],
)
def test_validation_names_the_key_path(tmp_path, text, key):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_cluster(path)
    assert key in str(err.value) and str(path) in str(err.value)


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("systems:\n  - name: a\n    ip: [127.0.0.1\n")
    with pytest.raises(
        ConfigError, match=r"cannot parse cluster description .*bad.yaml at line \d"
    ):
        load_cluster(path)


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"\xff\xfe systems: []")
    with pytest.raises(ConfigError, match=r"bad.yaml: it is not UTF-8 text; save it as UTF-8\."):
        load_cluster(path)


def test_machine_on_a_second_system(store, admin, tmp_path, monkeypatch):
    (tmp_path / "c.yaml").write_text(TWO_SYSTEMS)
    monkeypatch.setenv("CS2_CLUSTER", str(tmp_path / "c.yaml"))
    assert list_systems(store) == ["cs2-1", "cs2-2"]
    m2 = Machine(store, "cs2-2")
    assert (m2.ip, m2.status().active_mode) == ("127.0.1.2", ExecMode.WEIGHT_STREAMING)
    m2.standby(admin)
    assert Machine(store).status().state is State.ACTIVE  # systems are independent
    assert [e.system for e in m2.audit()] == ["cs2-2"]


def test_store_follows_changes_of_the_file_and_keeps_state(store, admin, cs2_home):
    Machine(store).standby(admin)
    (cs2_home / "cluster.yaml").write_text(TWO_SYSTEMS.replace("127.0.1.1", "127.0.9.9"))
    assert list_systems(store) == ["cs2-1", "cs2-2"]
    m = Machine(store)
    assert (m.ip, m.status().state) == ("127.0.9.9", State.STANDBY)  # new ip, same state
    (cs2_home / "cluster.yaml").write_text("systems: [{name: cs2-2, ip: 127.0.1.2}]\n")
    os.utime(cs2_home / "cluster.yaml", ns=(1, 1))  # a different mtime even on coarse clocks
    assert list_systems(store) == ["cs2-2"]


def test_hardware_facts_and_derived_figures():
    assert WSE2.pes == 757 * 996 == 753_972
    assert WSE2.sram_per_pe_bytes == 48 * 1024
    assert WSE2.fabric_sram_bytes == 753_972 * 49_152
    # 7.5 PFLOP/s over 850k cores at 1.1 GHz: ~8 FLOP per core per cycle
    assert WSE2.flops_per_pe_cycle == pytest.approx(7.5e15 / (850_000 * 1.1e9))
    assert 7.9 < WSE2.flops_per_pe_cycle < 8.1
    assert WSE2.pe_flops * WSE2.cores == pytest.approx(WSE2.peak_fp16_flops)
    assert WSE2.fabric_peak_flops < WSE2.peak_fp16_flops  # fewer placeable PEs than cores
    assert WSE2.io_bytes_s == 1.2e12 / 8


def test_a_tiny_wafer_for_tests():
    tiny = WaferSpec("tiny", 4, 3, 1024, 1e9, 12, 12 * 8e9, 1e12, 1e12, 1e9)
    assert (tiny.pes, tiny.fabric_sram_bytes, tiny.flops_per_pe_cycle) == (12, 12 * 1024, 8.0)
