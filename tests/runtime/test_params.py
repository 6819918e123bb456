"""Params YAML: loading, validation (errors name the key path), defaults, CLI, precision."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from cs2sim.runtime import params as P
from cs2sim.runtime import sections as S
from cs2sim.runtime.numerics import mixed_precision as MP
from cs2sim.runtime.schema import REQUIRED, Key, non_negative, positive, unit_interval
from cs2sim.system.errors import ConfigError

# Stand-ins for the model and optimizer schemas (owned by runtime/modelzoo and runtime/optim).
MODEL = {
    "hidden_size": Key(int, 50, "width", check=positive),
    "hidden_sizes": Key(list, None, "widths"),
    "depth": Key(int, 2, "layers", check=positive),
    "dropout": Key(float, 0.0, "drop rate", check=unit_interval),
    "activation_fn": Key(str, "relu", "activation", choices=("relu", "tanh", "linear")),
    "mixed_precision": Key(bool, False, "16-bit"),
    "fp16_type": Key(str, None, "half format"),
    "use_bfloat16": Key(bool, False, "legacy"),
}
OPTIMIZER = {
    "optimizer_type": Key(str, "adam", "which", choices=("sgd", "adam", "adamw")),
    "learning_rate": Key((float, dict, list), 1e-3, "lr or schedule"),
    "momentum": Key(float, 0.0, "", check=non_negative),
    "epsilon": Key(float, 1e-8, "", check=positive),
    "loss_scaling_factor": Key((float, str), 1.0, "static or 'dynamic'"),
}
REQUIRED_MODEL = {**MODEL, "num_heads": Key(int, REQUIRED, "attention heads")}
REAL_MODEL_SCHEMA, REAL_OPTIMIZER_SCHEMA = S.model_schema, S.optimizer_schema


@pytest.fixture(autouse=True)
def stand_in_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(P, "model_schema", lambda name: MODEL)
    monkeypatch.setattr(P, "optimizer_schema", lambda: OPTIMIZER)


def minimal(**sections: dict) -> dict:
    raw = {"train_input": {"batch_size": 8}, "model": {}, "optimizer": {}, "runconfig": {}}
    for name, body in sections.items():
        raw[name] = {**raw.get(name, {}), **body}
    return raw


def error(raw: dict) -> str:
    with pytest.raises(ConfigError) as e:
        P.validate_params(raw, "fc_mnist")
    return str(e.value)


# -- load_params ----------------------------------------------------------------------------------


def test_missing_file_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        P.load_params("configs/x.yaml")
    assert str(e.value) == (
        "params file configs/x.yaml not found; pass -p/--params with an existing file."
    )


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("train_input:\n  batch_size: 8\nmodel:\n  hidden_size: [1, 2\n  depth: 3\n")
    with pytest.raises(ConfigError) as e:
        P.load_params(f)
    msg = str(e.value)
    assert str(f) in msg and " line 5" in msg and msg.count("\n") == 0


def test_duplicate_key_is_an_error_with_its_line(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("model:\n  depth: 2\n  depth: 3\n")
    with pytest.raises(ConfigError, match=r"line 3.*duplicate key 'depth'"):
        P.load_params(f)


def test_exponent_without_dot_is_a_float(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("optimizer:\n  epsilon: 1e-8\n  learning_rate: 2.8e-4\n  momentum: 1E2\n")
    opt = P.load_params(f)["optimizer"]
    assert opt == {"epsilon": 1e-8, "learning_rate": 2.8e-4, "momentum": 100.0}


def test_empty_and_non_mapping_files(tmp_path):
    (tmp_path / "e.yaml").write_text("# nothing\n")
    with pytest.raises(ConfigError, match="is empty"):
        P.load_params(tmp_path / "e.yaml")
    (tmp_path / "l.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping of sections"):
        P.load_params(tmp_path / "l.yaml")


# -- validate_params: errors -----------------------------------------------------------------------


def test_wrong_type_names_key_path():
    assert error(minimal(train_input={"batch_size": "abc"})) == (
        "params.yaml: train_input.batch_size must be an integer, not 'abc'."
    )
    assert error(minimal(optimizer={"learning_rate": "fast"})) == (
        "params.yaml: optimizer.learning_rate must be a number, a mapping or a list, not 'fast'."
    )
    assert "runconfig.save_losses must be true or false, not 'yes'." in error(
        minimal(runconfig={"save_losses": "yes"})
    )
    assert "train_input.shuffle must be true or false, not 1." in error(
        minimal(train_input={"shuffle": 1})
    )


def test_learning_rate_errors_show_the_bad_value_once(monkeypatch):
    monkeypatch.setattr(P, "optimizer_schema", REAL_OPTIMIZER_SCHEMA)
    assert error(minimal(optimizer={"learning_rate": "fast"})) == (
        "params.yaml: optimizer.learning_rate must be a number or a schedule, not 'fast'."
    )
    bad = [
        {
            "scheduler": "linear",
            "initial_learning_rate": 0.0,
            "end_learning_rate": 0.01,
            "steps": 50,
        },
        {"scheduler": "cosine", "initial_learning_rate": 0.01, "decay_steps": "x"},
    ]
    assert error(minimal(optimizer={"learning_rate": bad})) == (
        "params.yaml: optimizer.learning_rate has a bad schedule: [1].decay_steps must be a "
        "positive integer, not 'x'."
    )


def test_bool_is_not_an_integer():
    assert "train_input.batch_size must be an integer, not true." in error(
        minimal(train_input={"batch_size": True})
    )


def test_unknown_section_is_fatal_and_suggests():
    msg = error({**minimal(), "trian_input": {}})
    assert msg.startswith("params.yaml: unknown section 'trian_input' (did you mean train_input?)")
    assert "allowed: description, train_input, eval_input, model, optimizer, runconfig" in msg


@pytest.mark.parametrize(
    "raw, path, phrase",
    [
        (minimal(train_input={"batch_size": 0}), "train_input.batch_size", "must be > 0, not 0."),
        (minimal(model={"dropout": 1.5}), "model.dropout", "must be in [0, 1), not 1.5."),
        (minimal(runconfig={"max_steps": -5}), "runconfig.max_steps", "must be >= 0, not -5."),
        (
            minimal(runconfig={"save_checkpoints_steps": -1}),
            "runconfig.save_checkpoints_steps",
            "must be >= 0, not -1.",
        ),
    ],
)
def test_impossible_values(raw, path, phrase):
    assert error(raw) == f"params.yaml: {path} {phrase}"


def test_bad_choice_lists_the_choices():
    assert error(minimal(runconfig={"mode": "trian"})) == (
        "params.yaml: runconfig.mode must be one of train, eval, eval_all, train_and_eval, "
        "not 'trian'."
    )
    assert "model.activation_fn must be one of relu, tanh, linear, not 'gelu'." in error(
        minimal(model={"activation_fn": "gelu"})
    )


def test_choices_are_case_insensitive_and_normalised():
    params, _ = P.validate_params(minimal(optimizer={"optimizer_type": "AdamW"}), "fc_mnist")
    assert params["optimizer"]["optimizer_type"] == "adamw"


def test_required_key_and_bad_section_shape(monkeypatch):
    assert error({"model": {}}) == (
        "params.yaml: section train_input is missing; it is required (at least batch_size)."
    )
    assert error({"train_input": {}, "model": {}}).startswith(
        "params.yaml: train_input.batch_size is required"
    )
    # no silent defaults for a missing model section
    assert error({"train_input": {"batch_size": 8}}).startswith(
        "params.yaml: section model is missing; it is required"
    )
    assert error({"train_input": {"batch_size": 8}, "model": None}).startswith(
        "params.yaml: section model has no keys; it is required"
    )
    # a misspelt required key: its "unknown key" warning would never be seen, so the error says it
    assert error({"train_input": {"batchsize": 8}, "model": {}}) == (
        "params.yaml: train_input.batch_size is required (samples per batch) and "
        "train_input.batchsize is not a key; rename batchsize to batch_size."
    )
    assert error({**minimal(), "model": [1, 2]}) == (
        "params.yaml: model must be a mapping of keys, not a list."
    )
    monkeypatch.setattr(P, "model_schema", lambda name: REQUIRED_MODEL)
    assert error(minimal()).startswith("params.yaml: model.num_heads is required")


def test_null_for_a_key_with_a_default_is_refused_but_allowed_where_default_is_null():
    assert "runconfig.model_dir needs a value" in error(minimal(runconfig={"model_dir": None}))
    params, _ = P.validate_params(minimal(runconfig={"cs_ip": None}), "fc_mnist")
    assert params["runconfig"]["cs_ip"] is None


def test_source_names_the_file():
    with pytest.raises(ConfigError, match=r"^configs/p\.yaml: train_input\.batch_size"):
        P.validate_params(minimal(train_input={"batch_size": 0}), "x", source="configs/p.yaml")


# -- validate_params: warnings, defaults ----------------------------------------------------------


def test_unknown_key_warns_with_suggestion_and_is_dropped():
    params, warnings = P.validate_params(minimal(model={"hiden_size": 10, "zzz": 1}), "fc_mnist")
    assert (
        "params.yaml: unknown key model.hiden_size ignored (did you mean hidden_size?)" in warnings
    )
    assert "params.yaml: unknown key model.zzz ignored" in warnings
    # what is ignored is not kept (so never re-serialized into params_train.yaml)
    assert params["model"]["hidden_size"] == 50 and "hiden_size" not in params["model"]


def test_defaults_filled_in_every_section():
    params, warnings = P.validate_params(minimal(), "fc_mnist")
    assert warnings == []
    for name, schema in [
        ("train_input", S.INPUT_SCHEMA),
        ("runconfig", S.RUNCONFIG_SCHEMA),
        ("csconfig", S.CSCONFIG_SCHEMA),
        ("model", MODEL),
        ("optimizer", OPTIMIZER),
    ]:
        assert set(schema) <= set(params[name]), name
    rc = params["runconfig"]
    assert (
        rc["log_steps"],
        rc["checkpoint_steps"],
        rc["seed"],
        rc["keep_checkpoint_max"],
        rc["model_dir"],
        rc["mode"],
    ) == (100, 0, 1, 5, "./model_dir", "train")
    assert params["train_input"]["shuffle"] is True and params["train_input"]["num_workers"] == 0
    assert params["optimizer"]["epsilon"] == 1e-8 and params["description"] is None


def test_eval_input_derived_from_train_input():
    params, _ = P.validate_params(minimal(train_input={"data_dir": "./d", "batch_size": 4}), "x")
    ev = params["eval_input"]
    assert (ev["data_dir"], ev["batch_size"], ev["shuffle"], ev["repeat"]) == (
        "./d",
        4,
        False,
        False,
    )
    assert params["train_input"]["shuffle"] is True


def test_ints_become_floats_and_integral_floats_ints():
    params, _ = P.validate_params(
        minimal(optimizer={"learning_rate": 1}, runconfig={"max_steps": 1e5}), "x"
    )
    assert params["optimizer"]["learning_rate"] == 1.0
    assert isinstance(params["optimizer"]["learning_rate"], float)
    assert params["runconfig"]["max_steps"] == 100000
    assert isinstance(params["runconfig"]["max_steps"], int)


# -- TF and PyTorch spellings ---------------------------------------------------------------------


def test_tf_spellings_fill_the_canonical_keys():
    params, warnings = P.validate_params(
        minimal(
            runconfig={
                "save_summary_steps": 500,
                "save_checkpoints_steps": 10000,
                "tf_random_seed": 7,
            }
        ),
        "x",
    )
    rc = params["runconfig"]
    # TF flow: summaries every save_summary_steps, console lines every log_step_count_steps (100)
    assert (rc["save_summary_steps"], rc["log_steps"], rc["checkpoint_steps"], rc["seed"]) == (
        500,
        100,
        10000,
        7,
    )
    assert warnings == []


def test_tf_flow_has_two_intervals():
    params, warnings = P.validate_params(
        minimal(runconfig={"save_summary_steps": 500, "log_step_count_steps": 20}), "x"
    )
    rc = params["runconfig"]
    assert (rc["log_steps"], rc["save_summary_steps"], rc["log_step_count_steps"]) == (20, 500, 20)
    assert warnings == []
    # Model Zoo's TF gpt2 set_defaults: log_step_count_steps defaults to save_summary_steps
    params, _ = P.validate_params(minimal(runconfig={"save_summary_steps": 50}), "gpt2")
    assert (params["runconfig"]["log_steps"], params["runconfig"]["save_summary_steps"]) == (50, 50)


def test_pytorch_flow_one_interval_for_both():
    params, warnings = P.validate_params(
        minimal(runconfig={"log_steps": 7, "save_summary_steps": 500}), "x"
    )
    rc = params["runconfig"]
    assert (rc["log_steps"], rc["save_summary_steps"], rc["log_step_count_steps"]) == (7, 7, None)
    assert warnings == [
        "params.yaml: runconfig.save_summary_steps (500) ignored because "
        "runconfig.log_steps (7) is also given"
    ]
    params, _ = P.validate_params(minimal(), "x")
    assert (params["runconfig"]["log_steps"], params["runconfig"]["save_summary_steps"]) == (
        100,
        100,
    )


def test_cli_interval_flags_follow_the_files_flow():
    tf, _ = P.validate_params(minimal(runconfig={"save_summary_steps": 500}), "fc_mnist")
    rc = P.apply_cli_overrides(tf, {"save_summary_steps": 3})["runconfig"]
    assert (rc["save_summary_steps"], rc["log_steps"]) == (3, 100)  # summaries only
    pt, _ = P.validate_params(minimal(runconfig={"log_steps": 50}), "fc_mnist")
    rc = P.apply_cli_overrides(pt, {"save_summary_steps": 3})["runconfig"]
    assert (rc["save_summary_steps"], rc["log_steps"]) == (3, 3)  # one number in PyTorch


def test_pytorch_spelling_wins_when_both_given():
    params, warnings = P.validate_params(
        minimal(
            runconfig={
                "checkpoint_steps": 2000,
                "save_checkpoints_steps": 10000,
                "seed": 3,
                "tf_random_seed": 3,
                "log_steps": 50,
                "save_summary_steps": 100,
            }
        ),
        "x",
    )
    rc = params["runconfig"]
    assert (rc["checkpoint_steps"], rc["seed"], rc["log_steps"]) == (2000, 3, 50)
    assert len(warnings) == 2  # equal seeds are not a conflict
    assert any(
        "save_checkpoints_steps (10000) ignored because runconfig.checkpoint_steps (2000)" in w
        for w in warnings
    )


def test_eval_steps_zero_means_whole_set():
    params, _ = P.validate_params(minimal(runconfig={"eval_steps": 0}), "x")
    assert params["runconfig"]["eval_steps"] is None


FC_MNIST_TF = textwrap.dedent("""\
    # Params for FC MNIST model
    description: "FC-MNIST base model params"

    train_input:
        shuffle: True
        data_dir: './tfds' # Place to store data
        batch_size: 256
        num_parallel_calls: 0   # 0 means AUTOTUNE

    model:
        hidden_sizes:
            - 500
            - 300
        dropout: 0.2
        activation_fn: 'relu'

    optimizer:
        learning_rate: 0.001
        beta1: 0.9
        beta2: 0.999
        epsilon: 1.0e-8

    runconfig:
        max_steps: 100000
        save_summary_steps: 500
        save_checkpoints_steps: 10000
        keep_checkpoint_max: 2
        model_dir: 'model_dir'
        cs_ip:
        multireplica: False
        mode: 'train'
    """)


def test_reference_fc_mnist_tf_config(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text(FC_MNIST_TF)
    params, warnings = P.validate_params(P.load_params(f), "fc_mnist")
    rc = params["runconfig"]
    assert (
        rc["log_steps"],
        rc["checkpoint_steps"],
        rc["keep_checkpoint_max"],
        rc["cs_ip"],
        rc["max_steps"],
    ) == (100, 10000, 2, None, 100000)
    assert rc["save_summary_steps"] == 500  # TF: summaries every 500, console lines every 100
    assert params["model"]["hidden_sizes"] == [500, 300]
    assert params["eval_input"]["batch_size"] == 256
    # beta1/beta2 are unknown to the stand-in optimizer schema only
    assert all("optimizer.beta" in w for w in warnings)


# -- write_params ---------------------------------------------------------------------------------


def test_write_params_round_trip_and_atomic(tmp_path):
    params, _ = P.validate_params(minimal(model={"hidden_sizes": (3, 4)}), "x")
    out = tmp_path / "model_dir" / "train" / "params_train.yaml"
    P.write_params(params, out)
    back = yaml.safe_load(out.read_text())
    assert back["model"]["hidden_sizes"] == [3, 4]
    assert back["runconfig"] == params["runconfig"]
    assert list(back) == list(params)  # section order kept
    assert [p.name for p in out.parent.iterdir()] == ["params_train.yaml"]  # no temp left


# -- CLI overrides --------------------------------------------------------------------------------


def test_cli_overrides_runconfig():
    params, _ = P.validate_params(
        minimal(runconfig={"max_steps": 10, "multireplica": True, "save_checkpoints_steps": 5}), "x"
    )
    out = P.apply_cli_overrides(
        params,
        {
            "max_steps": 99,
            "multireplica": None,
            "mode": "eval",
            "save_checkpoints_steps": 3,
            "eval_steps": 0,
            "params": "configs/p.yaml",
        },
    )
    rc = out["runconfig"]
    assert (rc["max_steps"], rc["multireplica"], rc["mode"]) == (99, True, "eval")
    assert rc["checkpoint_steps"] == 3 and rc["eval_steps"] is None
    assert rc["params"] == "configs/p.yaml"
    assert params["runconfig"]["max_steps"] == 10  # the input is not modified


def test_cli_override_is_validated():
    params, _ = P.validate_params(minimal(), "x")
    with pytest.raises(ConfigError) as e:
        P.apply_cli_overrides(params, {"max_steps": -1})
    assert str(e.value) == "command line: --max_steps must be >= 0, not -1."


# -- resolve_precision (Model Zoo's mixed-precision keys, docs/sources.md)
# ------------------------------------------------------------


def resolved(model: dict, optimizer: dict | None = None, csconfig: dict | None = None):
    raw = minimal(model=model, optimizer=optimizer or {}, csconfig=csconfig or {})
    params, _ = P.validate_params(raw, "x")
    half, warnings = MP.resolve_precision(params)
    return half, warnings, params


def test_mixed_precision_off_is_float32():
    assert resolved({})[0] == "float32"
    half, warnings, _ = resolved({"fp16_type": "bfloat16"})
    assert half == "float32" and "training runs in float32" in warnings[0]


def test_mixed_precision_default_is_float16():
    assert resolved({"mixed_precision": True})[:2] == ("float16", [])


def test_cbfloat16_without_dls_is_the_reference_error():
    with pytest.raises(ConfigError) as e:
        resolved({"mixed_precision": True, "fp16_type": "cbfloat16"})
    assert str(e.value) == (
        "In order to use cbfloat16, dynamic loss scaling must be enabled. Otherwise, gradients "
        "might underflow/overflow in the middle of training and cause NaNs. Please set "
        "`loss_scaling_factor` to `dynamic` to use cbfloat16."
    )
    half, warnings, _ = resolved(
        {"mixed_precision": True, "fp16_type": "cbfloat16"}, {"loss_scaling_factor": "dynamic"}
    )
    assert (half, warnings) == ("cbfloat16", [])


def test_bfloat16_with_dls_warns_and_sets_factor_to_one():
    half, warnings, params = resolved(
        {"mixed_precision": True, "fp16_type": "bfloat16"}, {"loss_scaling_factor": "dynamic"}
    )
    assert half == "bfloat16"
    assert warnings == [
        "No need to use DLS for loss when half dtype is bfloat16. "
        "Setting `loss_scaling_factor ` to `1.0`."
    ]
    assert params["optimizer"]["loss_scaling_factor"] == 1.0


def test_legacy_flags_map_to_fp16_type():
    half, warnings, _ = resolved(
        {"mixed_precision": True}, {"loss_scaling_factor": "dynamic"}, {"use_cbfloat16": True}
    )
    assert (half, warnings) == ("cbfloat16", [])
    half, warnings, _ = resolved({"mixed_precision": True, "use_bfloat16": True})
    assert half == "bfloat16"
    assert warnings == ['The flag "use_bfloat16" is deprecated. Use the flag "fp16_type" instead.']


def test_bad_fp16_type_and_model_to_float16():
    with pytest.raises(
        ConfigError, match="model.fp16_type must be one of float16, bfloat16, cbfloat16, not 'half'"
    ):
        resolved({"mixed_precision": True, "fp16_type": "half"})
    params, _ = P.validate_params(minimal(), "x")
    params["model"]["to_float16"] = True
    with pytest.raises(ConfigError, match="model.to_float16 must be false"):
        MP.resolve_precision(params)


def test_precision_opt_level_in_model_moves_to_runconfig():
    params, _ = P.validate_params(minimal(), "x")
    params["model"]["precision_opt_level"] = 0
    _, warnings = MP.resolve_precision(params)
    assert params["runconfig"]["precision_opt_level"] == 0
    assert "precision_opt_level" not in params["model"]
    assert warnings == [
        "Passing `precision_opt_level` via `model` params is deprecated. "
        'Please use `params["runconfig"]["precision_opt_level"]`'
    ]


# -- the reference configs against the real model schemas (runtime/modelzoo) ----------------------

FC_MNIST_PT = """\
train_input:
    data_dir: "./data/mnist/train"
    batch_size: 128
    drop_last_batch: True
    shuffle: True

eval_input:
    data_dir: "./data/mnist/val"
    batch_size: 128
    drop_last_batch: True

model:
    name: "fc_mnist"
    mixed_precision: True
    depth: 10
    hidden_size: 50
    dropout: 0.0
    activation_fn: "relu"

optimizer:
    optimizer_type: "SGD"
    learning_rate: 0.001
    momentum: 0.9
    loss_scaling_factor: 1.0

runconfig:
    max_steps: 10000
    checkpoint_steps: 2000
    log_steps: 50
    seed: 1
    save_losses: True
"""

GPT2_TF = """\
train_input:
    data_processor: "GptTfRecordsProcessor"
    data_dir: "./input/owt_pretraining_gpt/train_msl1024/"
    vocab_size: 50257
    max_sequence_length: 1024
    shuffle: True
    repeat: True
    batch_size: 32

eval_input:
    data_processor: "GptTfRecordsProcessor"
    data_dir: "./input/owt_pretraining_gpt/val_msl1024/"
    vocab_size: 50257
    max_sequence_length: 1024
    shuffle: True
    repeat: False
    batch_size: 32

model:
    hidden_size: 768
    use_position_embedding: True
    position_embedding_type: "learned"
    share_embedding_weights: True
    max_position_embeddings: 1024
    num_hidden_layers: 12
    dropout_rate: 0.0
    layer_norm_epsilon: 1.0e-5
    num_heads: 12
    attention_dropout_rate: 0.0
    use_projection_bias_in_attention: True
    filter_size: 3072
    nonlinearity: "gelu"
    use_ffn_bias: True
    loss_scaling: "batch_size"
    loss_weight: 0.00097656 # = 1/max_seqence_length
    mixed_precision: True
    boundary_casting: False
    tf_summary: False
    use_vsl: False

optimizer:
    optimizer_type: "adamw"
    weight_decay_rate: 0.01
    learning_rate: 2.8e-4
    loss_scaling_factor: "dynamic"
    log_summaries: True

runconfig:
    max_steps: 1000000
    save_summary_steps: 100
    save_checkpoints_steps: 10000
    keep_checkpoint_max: 2
    enable_distributed: False
"""

GPT2_PT = """\
train_input:
    data_processor: "GptHDF5DataProcessor"
    data_dir: "./gpt2_hdf5_8M_msl1024/"
    vocab_size: 50257
    max_sequence_length: 1024
    batch_size: 32  # 4 for GPU
    shuffle: True
    shuffle_seed: 1337
    num_workers: 8
    prefetch_factor: 10
    persistent_workers: True # Important to avoid seeding at each epoch

eval_input:
    data_processor: "GptHDF5DataProcessor"
    data_dir: "./gpt2_hdf5_val_msl1024/"
    vocab_size: 50257
    max_sequence_length: 1024
    batch_size: 32 # 4 for GPU
    shuffle: False
    num_workers: 8

model:
    vocab_size: 50257
    hidden_size: 768
    use_position_embedding: True
    position_embedding_type: "learned"
    share_embedding_weights: True
    max_position_embeddings: 1024
    num_hidden_layers: 12
    dropout_rate: 0.0
    layer_norm_epsilon: 1.0e-5
    num_heads: 12
    attention_type: "scaled_dot_product"
    attention_dropout_rate: 0.0
    use_projection_bias_in_attention: True
    use_ffn_bias_in_attention: True
    filter_size: 3072
    nonlinearity: "gelu"
    use_ffn_bias: True
    use_bias_in_output: False
    loss_weight: 0.0009765625 # = 1/max_sequence_length
    mixed_precision: True

optimizer:
    optimizer_type: "AdamW"
    correct_bias: True
    disable_lr_steps_reset: False
    weight_decay_rate: 0.01
    max_gradient_norm: 1.0
    learning_rate: 0.00028
    loss_scaling_factor: "dynamic"

runconfig:
    max_steps: 150000
    log_steps: 100
    checkpoint_steps: 10000
    save_initial_checkpoint: True
    seed: 1
    model_dir: "./model_dir"
    show_debug_metrics: False
    save_losses: True
    eval_steps: 233
"""


@pytest.mark.parametrize(
    "model_name, text",
    [
        ("fc_mnist", FC_MNIST_TF),
        ("fc_mnist", FC_MNIST_PT),
        ("gpt2", GPT2_TF),
        ("gpt2", GPT2_PT),
    ],
    ids=["fc_mnist-tf", "fc_mnist-pt", "gpt2-tf", "gpt2-pt"],
)
def test_reference_configs_with_real_schemas(monkeypatch, tmp_path, model_name, text):
    """Model Zoo's params files verbatim (docs/sources.md): no error, and no warning outside
    `optimizer` (whose schema
    is a stand-in until runtime/numerics/optim.py exists)."""
    monkeypatch.setattr(P, "model_schema", REAL_MODEL_SCHEMA)
    monkeypatch.setattr(P, "optimizer_schema", REAL_OPTIMIZER_SCHEMA)
    stand_in = ()
    f = tmp_path / "params.yaml"
    f.write_text(text)
    params, warnings = P.validate_params(P.load_params(f), model_name)
    assert [w for w in warnings if not w.startswith(stand_in or "\0")] == []
    if model_name == "gpt2":
        assert params["model"]["vocab_size"] == 50257  # from train_input in the TF config
    half, _ = MP.resolve_precision(params)
    # every one is mixed precision: fc_mnist's TF config by its flow (the Model Zoo's TF fc_mnist
    # set Keras mixed_float16 in its code, not its config)
    assert half == "float16"


# -- bounds known up front -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            minimal(eval_input={"batch_size": 1e308}),
            "params.yaml: eval_input.batch_size must be an integer, not 1e+308.",
        ),
        (
            minimal(runconfig={"eval_steps": 1e308}),
            "params.yaml: runconfig.eval_steps must be an integer, not 1e+308.",
        ),
        (
            minimal(runconfig={"keep_checkpoint_max": 1e308}),
            "params.yaml: runconfig.keep_checkpoint_max must be an integer, not 1e+308.",
        ),
        (
            minimal(runconfig={"keep_checkpoint_max": 2**63}),
            "params.yaml: runconfig.keep_checkpoint_max must be at most 2**53 in size, "
            f"not {2**63}.",
        ),
        (
            minimal(runconfig={"keep_checkpoint_max": 2**40}),
            f"params.yaml: runconfig.keep_checkpoint_max must be in [0, 100000], not {2**40}.",
        ),
        (
            minimal(train_input={"batch_size": 2**30}),
            f"params.yaml: train_input.batch_size must be at most 1048576, not {2**30}.",
        ),
        (
            minimal(optimizer={"learning_rate": 1e30}),
            "params.yaml: optimizer.learning_rate must be at most 10, not 1e+30; a step that large "
            "diverges at once (lower it).",
        ),
        (
            minimal(
                optimizer={
                    "learning_rate": [
                        {
                            "scheduler": "Linear",
                            "initial_learning_rate": 0.0,
                            "end_learning_rate": 1e30,
                            "steps": 10,
                        }
                    ]
                }
            ),
            "params.yaml: optimizer.learning_rate[0].end_learning_rate must be at most 10, "
            "not 1e+30; a step that large diverges at once (lower it).",
        ),
        (
            minimal(model={"dropout": float("nan")}),
            "params.yaml: model.dropout must be a finite number, not nan.",
        ),
    ],
)
def test_bounds_known_up_front_are_checked_at_validation(raw, message):
    assert error(raw) == message


def test_whole_floats_of_sane_size_still_pass_as_integers():
    params, _ = P.validate_params(minimal(runconfig={"max_steps": 1e5, "eval_steps": 2.0}), "x")
    assert params["runconfig"]["max_steps"] == 100000 and params["runconfig"]["eval_steps"] == 2


def test_gpt2_without_model_section_is_refused_with_the_real_schema(monkeypatch):
    monkeypatch.setattr(P, "model_schema", REAL_MODEL_SCHEMA)
    monkeypatch.setattr(P, "optimizer_schema", REAL_OPTIMIZER_SCHEMA)
    with pytest.raises(
        ConfigError,
        match=r"^params.yaml: section model is missing; it is "
        r"required \(the model's shape",
    ):
        P.validate_params(
            {"train_input": {"batch_size": 2}, "optimizer": {"learning_rate": 0.1}}, "gpt2"
        )


def test_embedding_size_must_match_hidden_size():
    P.validate_params(minimal(model={"embedding_size": 50}), "x")  # hidden_size default 50
    assert error(minimal(model={"embedding_size": 64})).startswith(
        "params.yaml: model.embedding_size (64) must equal model.hidden_size (50) here"
    )


def test_data_dir_is_a_string_or_a_list_of_paths():
    params, _ = P.validate_params(minimal(train_input={"data_dir": ["a", "b"]}), "x")
    assert params["train_input"]["data_dir"] == ["a", "b"]
    assert params["eval_input"]["data_dir"] == ["a", "b"]
    assert error(minimal(train_input={"data_dir": ["a", 3]})) == (
        "params.yaml: train_input.data_dir must be a path or a list of paths; item 1 is 3, "
        "not a path."
    )
    assert error(minimal(train_input={"data_dir": []})) == (
        "params.yaml: train_input.data_dir must name at least one directory, not a list."
    )


# -- one bounded YAML loader for params and cluster files --------------------------


def _bomb(depth: int, indent: str = "  ") -> str:
    lines = ["runconfig:", f"{indent}a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, depth + 1):
        lines.append(f"{indent}a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\ntrain_input: {batch_size: 1}\nmodel: {}\n"


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        (_bomb(6), "more than 200000 nodes once aliases are expanded (limit max_nodes)"),
        (_bomb(9), "more than 200000 nodes once aliases are expanded (limit max_nodes)"),
        (
            "a: &x [1]\n" + "".join(f"b{i}: *x\n" for i in range(300)),
            "more than 256 aliases (limit max_aliases)",
        ),
        ("x: " + "[" * 100 + "]" * 100 + "\n", "nesting deeper than 64 levels (limit max_depth)"),
        ("a: &a [1, *a]\n", "a recursive anchor (a collection that contains itself)"),
    ],
)
def test_params_file_read_with_bounded_work(tmp_path, text, limit):
    import time

    f = tmp_path / "p.yaml"
    f.write_text(text)
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        P.load_params(f)
    assert time.perf_counter() - t0 < 5  # milliseconds in practice; 47 s before the fix
    assert str(e.value) == (
        f"{f} has {limit}; a params or cluster file needs nothing like "
        "that: remove the anchors/nesting."
    )


def test_params_file_size_limit(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_text("description: '" + "x" * (1 << 20) + "'\n")
    with pytest.raises(
        ConfigError,
        match=r"big.yaml is 1048592 bytes, over the 1048576-byte "
        r"limit \(max_bytes\) for a params file; shorten it\.",
    ):
        P.load_params(f)


def test_cluster_file_uses_the_same_bounded_loader(tmp_path):
    from cs2sim.system.cluster import load_cluster

    f = tmp_path / "cluster.yaml"
    f.write_text(_bomb(9).replace("runconfig:", "systems:"))
    with pytest.raises(
        ConfigError,
        match=r"^cluster description .*cluster.yaml has more than "
        r"200000 nodes .*\(limit max_nodes\)",
    ):
        load_cluster(f)


def test_small_aliases_still_work(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("train_input: &t {batch_size: 4}\neval_input: *t\nmodel: {}\n")
    raw = P.load_params(f)
    assert raw["eval_input"] == {"batch_size": 4}


def test_control_character_is_one_line_error(tmp_path):
    """Found by tests/reliability/test_params_fuzz.py: a NUL byte escaped as a ReaderError."""
    f = tmp_path / "p.yaml"
    f.write_text("\x00train_input: {batch_size: 1}\n")
    with pytest.raises(ConfigError) as e:
        P.load_params(f)
    message = str(e.value)
    assert message.startswith(f"{f}: unacceptable character #x0000") and "\n" not in message


def test_learning_rate_bound_applies_to_numeric_strings(monkeypatch):
    monkeypatch.setattr(P, "optimizer_schema", REAL_OPTIMIZER_SCHEMA)
    assert error(minimal(optimizer={"learning_rate": "1e30"})) == (
        "params.yaml: optimizer.learning_rate must be at most 10, not 1e+30; a step that large "
        "diverges at once (lower it)."
    )
