"""`cszoo checkpoint convert` to and from Hugging Face for gpt2, llama and bert: a checkpoint
written here with the Hugging Face names and shapes is converted in, gives Hugging Face's
logits (a numpy transcription of its forward pass), trains one step, is converted out and
read back with the same tensors; the untouched round trip is byte-identical; a checkpoint of
another model or shape is refused in one sentence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hf_fixtures import write_hf
from hf_reference import gpt2_logits, llama_logits
from safetensors.numpy import load_file

from cs2sim.runtime import registry
from cs2sim.runtime.artifacts.checkpoint import load_checkpoint
from cs2sim.runtime.numerics.precision import Policy
from cs2sim.runtime.zoo.hf_convert import hf_to_cs
from cs2sim.scripts.cszoo import main as cszoo

# 16-bit tolerance (docs/modelzoo-today.md): conversions are exact; what differs is only the
# order of float32 sums (and BERT's gelu, tanh here and erf in Hugging Face), far below the
# 2**-8 relative step of bfloat16.
RTOL = 2.0**-8


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cszoo(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def convert_in(capsys, model: str, tmp: Path) -> tuple[dict, dict, Path]:
    tensors, config = write_hf(model, tmp / "hf")
    code, out, err = run(
        capsys,
        "checkpoint",
        "convert",
        "--model",
        model,
        "--src-fmt",
        "hf",
        "--tgt-fmt",
        "cs-2.4",
        "--config",
        str(tmp / "hf" / "config.json"),
        str(tmp / "hf"),
        "-o",
        str(tmp / "cs"),
    )
    assert code == 0, err
    assert "Converted" in out
    return tensors, config, tmp / "cs"


def our_probs(model: str, cs: Path, ids: np.ndarray) -> np.ndarray:
    mp = yaml.safe_load((cs / "params_from_hf.yaml").read_text())["trainer"]["init"]["model"]
    from cs2sim.runtime.params import validate_params

    params, _ = validate_params(
        {"train_input": {"batch_size": 1}, "model": mp, "optimizer": {"learning_rate": 0.0}}, model
    )
    net = registry.get(model)(params["model"], Policy("float32"), 0)
    state = load_checkpoint(cs / "model-ckpt-0.npz")
    for k, v in net.parameters().items():
        v[...] = state.model[k]
    net.eval()
    net.forward_loss({"input_ids": ids, "labels": np.roll(ids, -1, axis=1)})
    return np.asarray(net._ce().probs).reshape(*ids.shape, -1)


@pytest.mark.parametrize(("model", "reference"), [("gpt2", gpt2_logits), ("llama", llama_logits)])
def test_converted_checkpoint_gives_hugging_face_logits(capsys, tmp_path, model, reference):
    tensors, config, cs = convert_in(capsys, model, tmp_path)
    ids = np.random.default_rng(1).integers(0, config["vocab_size"], size=(2, 16)).astype(np.int32)
    z = reference(tensors, config, ids)
    z = np.exp(z - z.max(-1, keepdims=True))
    want = z / z.sum(-1, keepdims=True)
    got = our_probs(model, cs, ids)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-6)
    # and a wrongly mapped checkpoint would not: swap two layers' attention
    swapped = dict(tensors)
    a, b = sorted(k for k in tensors if k.endswith(("c_attn.weight", "q_proj.weight")))[:2]
    swapped[a], swapped[b] = tensors[b], tensors[a]
    z2 = reference(swapped, config, ids)
    assert not np.allclose(z2, reference(tensors, config, ids), rtol=RTOL)


def trainer_yaml(model: str, cs: Path, folder: Path) -> Path:
    mp = yaml.safe_load((cs / "params_from_hf.yaml").read_text())["trainer"]["init"]["model"]
    loader: dict = {"batch_size": 4, "max_sequence_length": 32, "stand_in_data": True}
    if model == "bert":
        loader |= {"max_predictions_per_seq": 5, "dynamic_mlm_scale": True}
    else:
        loader |= {"vocab_size": mp["vocab_size"]}
    params = {
        "trainer": {
            "init": {
                "backend": {"backend_type": "CPU"},
                "seed": 3,
                "model": mp,
                "optimizer": {"AdamW": {"weight_decay": 0.01}},
                "schedulers": [{"ConstantLR": {"learning_rate": 1e-3}}],
                "loop": {"max_steps": 1},
                "checkpoint": {"steps": 1},
            },
            "fit": {"train_dataloader": {**loader, "shuffle": True}},
        }
    }
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt2", "llama", "bert"])
def test_in_train_one_step_out_and_back(capsys, tmp_path, model):
    tensors, config, cs = convert_in(capsys, model, tmp_path)
    # the untouched round trip: the same tensors, bit for bit, and the same config
    code, _, err = run(
        capsys,
        "checkpoint",
        "convert",
        "--model",
        model,
        "--src-fmt",
        "cs-2.4",
        "--tgt-fmt",
        "hf",
        "--config",
        str(cs / "params_from_hf.yaml"),
        str(cs / "model-ckpt-0.npz"),
        "-o",
        str(tmp_path / "back"),
    )
    assert code == 0, err
    back = load_file(str(tmp_path / "back" / "model.safetensors"))
    assert sorted(back) == sorted(tensors)
    assert all(np.array_equal(back[k], tensors[k]) for k in tensors)
    again = json.loads((tmp_path / "back" / "config.json").read_text())
    same = [k for k in config if k in again and k != "n_inner"]  # n_inner: None -> 4 * n_embd
    assert {k: again[k] for k in same} == {k: config[k] for k in same}
    assert len(same) >= len(config) - 3  # only the dropouts cs2sim has one of are not kept
    # one step from the converted weights (weights only: step 0)
    params = trainer_yaml(model, cs, tmp_path)
    md = tmp_path / "md"
    code, out, err = run(
        capsys,
        "fit",
        str(params),
        "-o",
        str(md),
        "--checkpoint_path",
        str(cs / "model-ckpt-0.npz"),
        "--load_checkpoint_states",
        "model",
    )
    assert code == 0, out + err
    trained = load_checkpoint(md / "model-ckpt-1.npz")
    assert trained.step == 1
    start = load_checkpoint(cs / "model-ckpt-0.npz").model
    assert any(not np.array_equal(trained.model[k], start[k]) for k in start)  # it trained
    # out, then read back in: the trained tensors
    code, _, err = run(
        capsys,
        "checkpoint",
        "convert",
        "--model",
        model,
        "--src-fmt",
        "cs-2.4",
        "--tgt-fmt",
        "hf",
        "--config",
        str(params),
        str(md / "model-ckpt-1.npz"),
        "-o",
        str(tmp_path / "out"),
    )
    assert code == 0, err
    out_tensors = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert sorted(out_tensors) == sorted(tensors)
    out_config = json.loads((tmp_path / "out" / "config.json").read_text())
    _, weights = hf_to_cs(model, out_tensors, out_config)
    assert sorted(weights) == sorted(trained.model)
    assert all(np.array_equal(weights[k], trained.model[k]) for k in weights)
    code, out, _ = run(capsys, "checkpoint", "info", str(md / "model-ckpt-1.npz"))
    assert code == 0 and f"Model: {model}" in out and "Step: 1" in out


def test_checkpoint_info_of_hugging_face(capsys, tmp_path):
    tensors, _ = write_hf("llama", tmp_path / "hf")
    code, out, _ = run(capsys, "checkpoint", "info", str(tmp_path / "hf"))
    assert code == 0
    assert "Format: hf" in out and "Model: llama" in out
    assert f"Tensors: {len(tensors)}" in out
    assert f"Parameters: {sum(t.size for t in tensors.values()):,}" in out


def test_wrong_model_and_wrong_shape_are_refused_in_one_sentence(capsys, tmp_path):
    write_hf("llama", tmp_path / "hf")
    argv = ["checkpoint", "convert", "--src-fmt", "hf", "--tgt-fmt", "cs-2.4", "--config"]
    code, out, err = run(
        capsys, *argv, str(tmp_path / "hf/config.json"), "--model", "gpt2", str(tmp_path / "hf")
    )
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "'llama' model, not gpt2" in err
    # a tensor of another shape
    t = load_file(str(tmp_path / "hf/model.safetensors"))
    t["model.layers.1.mlp.up_proj.weight"] = t["model.layers.1.mlp.up_proj.weight"][:-1]
    from safetensors.numpy import save_file

    save_file(t, str(tmp_path / "hf/model.safetensors"))
    code, out, err = run(
        capsys,
        *argv,
        str(tmp_path / "hf/config.json"),
        "--model",
        "llama",
        str(tmp_path / "hf"),
        "-o",
        str(tmp_path / "cs"),
    )
    assert code == 1 and err.count("\n") == 1
    assert "up_proj" in err and "shape" in err
    assert not (tmp_path / "cs").exists()  # nothing written
    code, _, err = run(
        capsys, *argv[:-1], "--config", "x", "--model", "gpt2", "--tgt-fmt", "hf", "y"
    )
    assert code == 1 and "converts nothing" in err


def _save_bf16(tensors: dict[str, np.ndarray], path: Path) -> None:
    """A safetensors file with BF16 tensors, laid out by hand (numpy has no bfloat16): header
    length, JSON header, then each tensor's top 16 bits."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        raw = (a.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        header[name] = {
            "dtype": "BF16",
            "shape": list(a.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def test_bfloat16_checkpoint_is_widened_exactly(capsys, tmp_path):
    tensors, _ = write_hf("llama", tmp_path / "hf")
    _save_bf16(tensors, tmp_path / "hf" / "model.safetensors")
    code, _, err = run(
        capsys,
        "checkpoint",
        "convert",
        "--model",
        "llama",
        "--src-fmt",
        "hf",
        "--tgt-fmt",
        "cs-2.4",
        "--config",
        str(tmp_path / "hf" / "config.json"),
        str(tmp_path / "hf"),
        "-o",
        str(tmp_path / "cs"),
    )
    assert code == 0, err
    weights = load_checkpoint(tmp_path / "cs" / "model-ckpt-0.npz").model
    want = tensors["model.layers.0.self_attn.o_proj.weight"]
    bf16 = ((want.view(np.uint32) >> 16) << 16).view(np.float32)  # truncated to bfloat16
    assert np.array_equal(weights["h0.attn.proj.weight"], bf16.T)
    assert not np.array_equal(bf16, want)  # the file really held 16-bit values


def test_converted_bert_gives_hugging_face_mlm_and_nsp_logits(capsys, tmp_path):
    from hf_reference import bert_logits

    tensors, config, cs = convert_in(capsys, "bert", tmp_path)
    rng = np.random.default_rng(2)
    ids = rng.integers(0, config["vocab_size"], size=(2, 16)).astype(np.int32)
    types = (np.arange(16) >= 8).astype(np.int32)[None].repeat(2, 0)
    positions = np.array([[1, 4, 9], [2, 3, 15]], dtype=np.int32)
    want_mlm, want_nsp = bert_logits(tensors, config, ids, types, positions)
    mp = yaml.safe_load((cs / "params_from_hf.yaml").read_text())["trainer"]["init"]["model"]
    from cs2sim.runtime.params import validate_params

    params, _ = validate_params(
        {"train_input": {"batch_size": 1}, "model": mp, "optimizer": {"learning_rate": 0.0}}, "bert"
    )
    net = registry.get("bert")(params["model"], Policy("float32"), 0)
    state = load_checkpoint(cs / "model-ckpt-0.npz")
    for k, v in net.parameters().items():
        v[...] = state.model[k]
    net.eval()
    x, _ = net.inputs({"input_ids": ids, "token_type_ids": types})
    for block in net.blocks[:-1]:
        x = block.forward(x)
    head = net.blocks[-1]
    # gelu: tanh here, erf in Hugging Face: equal within the 16-bit tolerance of the logits' scale
    for got, want in ((head.mlm.forward(x, positions), want_mlm), (head.nsp.forward(x), want_nsp)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.abs(want).max())
