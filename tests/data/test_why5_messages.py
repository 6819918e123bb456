"""Each bad input ends in one sentence naming the file (and the sample) and the fix: a corrupt
gzip chunk, an unreadable file, a negative id, an all-padding sample, a -1 label where the
attention mask is 1 (gzip and uncompressed alike, found before training), and the wording of
the workers' and streamers' log lines, the data description and the preprocessing's files."""

from __future__ import annotations

import logging

import pytest

h5py = pytest.importorskip("h5py")

from gpt_h5 import VOCAB, T, params, rows, write  # noqa: E402

from cs2sim.runtime.cli.main import main  # noqa: E402
from cs2sim.runtime.data import build_input, hdf5, hdf5_layout  # noqa: E402
from cs2sim.runtime.data.tfrecord import encode_example, write_records  # noqa: E402
from cs2sim.system.errors import ConfigError  # noqa: E402


def refused(p: dict) -> str:
    with pytest.raises(ConfigError) as e:
        build_input(p, "train", "gpt2", 1)
    text = str(e.value)
    assert "\n" not in text and text.endswith(".")
    return text


def test_a_corrupt_gzip_chunk_names_the_file_and_sample(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CS2_HOME", str(tmp_path / "home"))
    path = write(tmp_path / "h5" / "examples_0_0.h5", rows(40), gz=True)
    with h5py.File(path, "r") as f:  # where sample 17's compressed bytes are
        info = f["data"].id.get_chunk_info_by_coord((17, 0, 0))
    raw = bytearray(path.read_bytes())
    for k in range(8, 16):
        raw[info.byte_offset + k] ^= 0xFF
    path.write_bytes(bytes(raw))
    text = refused(params(path.parent))
    assert text.startswith(f"HDF5 file {path} sample 17: the compressed data is corrupt (")
    assert text.endswith("); re-create the file.")
    # through run.py's entry point: that one line, no "internal error"
    import yaml

    from cs2sim.runtime.cli.main import model_home

    doc = yaml.safe_load((model_home("gpt2") / "configs" / "params_tiny.yaml").read_text())
    for section in ("train_input", "eval_input"):
        doc[section].pop("stand_in_data", None)
        doc[section].update(params(path.parent)["train_input"])
    doc["model"].update(vocab_size=VOCAB, max_position_embeddings=T)
    cfg = tmp_path / "p.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    code = main("gpt2", ["-m", "train", "-p", str(cfg), "-o", str(tmp_path / "md")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "internal error" not in err, err
    assert f"HDF5 file {path} sample 17: the compressed data is corrupt" in err


def test_a_corrupt_chunk_of_a_large_data_set_is_named_when_read(tmp_path, monkeypatch):
    monkeypatch.setattr(hdf5, "CHECK_ALL_VALUES", 0)  # read lazily, batch by batch
    path = write(tmp_path / "h5" / "a.h5", rows(40), gz=True)
    with h5py.File(path, "r") as f:
        info = f["data"].id.get_chunk_info_by_coord((5, 0, 0))
    raw = bytearray(path.read_bytes())
    raw[info.byte_offset + 10] ^= 0xFF
    path.write_bytes(bytes(raw))
    with build_input(params(path.parent, shuffle=False), "train", "gpt2", 1) as s:
        next(s)  # samples 0-3
        with pytest.raises(ConfigError, match=r"a\.h5 sample 5: the compressed data is corrupt"):
            next(s)


def test_permission_denied_is_said_as_such(tmp_path, monkeypatch):
    path = write(tmp_path / "h5" / "a.h5", rows(8), gz=False)
    path.chmod(0)
    import builtins

    real = builtins.open

    def denied(file, *a, **kw):  # what the kernel answers anyone but root
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real(file, *a, **kw)

    monkeypatch.setattr(hdf5_layout, "open", denied, raising=False)
    assert refused(params(path.parent)) == (
        f"HDF5 file {path} cannot be read: permission denied; make it readable (chmod a+r) "
        "or point data_dir elsewhere."
    )


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "uncompressed"])
def test_negative_ids_and_labels_are_not_a_vocab_size_problem(tmp_path, gz):
    data = rows(40)
    data[29, 0, 3] = -5
    path = write(tmp_path / "h5" / "a.h5", data, gz)
    text = refused(params(path.parent))
    assert text == (
        f"HDF5 file {path} sample 29 has input id -5, but token ids lie in [0, {VOCAB}); "
        "re-create the data."
    )
    assert "raise vocab_size" not in text


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "uncompressed"])
def test_a_minus_one_label_is_padding_only_where_the_mask_is_zero(tmp_path, gz):
    data = rows(40)
    data[33, 2, 7] = -1  # attention mask 1 there: not padding
    path = write(tmp_path / "h5" / "a.h5", data, gz)
    text = refused(params(path.parent))  # found when the files load, before any step
    assert text.startswith(f"HDF5 file {path} sample 33 has label -1, but token ids lie in")
    assert "labels may be -1 (ignored) only where attention_mask is 0" in text
    data[33, 1, 7:] = 0  # now padding: any label there is ignored
    write(path, data, gz)
    with build_input(params(path.parent, shuffle=False, batch_size=40), "train", "gpt2", 1) as s:
        assert (next(s)["labels"][33, 7:] == -1).all()


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "uncompressed"])
def test_ids_past_the_vocabulary_are_found_before_training_in_both_layouts(tmp_path, gz):
    data = rows(40)
    data[0, 0, 9] = VOCAB + 4  # sample 0: read in the first shuffled batch or the last
    path = write(tmp_path / "h5" / "a.h5", data, gz)
    assert refused(params(path.parent)) == (
        f"HDF5 file {path} has token id {VOCAB + 4} but vocab_size is {VOCAB} (sample 0); "
        "raise vocab_size or re-tokenise the data."
    )


def test_an_all_zero_attention_mask_is_refused(tmp_path):
    data = rows(40)
    data[12, 1] = 0
    path = write(tmp_path / "h5" / "a.h5", data, gz=True)
    assert refused(params(path.parent)) == (
        f"HDF5 file {path} sample 12 has an all-zero attention_mask (no position to learn "
        "from: it would train at loss 0); drop it or re-create the data."
    )
    d = tmp_path / "tfr"
    d.mkdir()
    recs = [
        encode_example({"input_ids": r[0], "input_mask": r[1], "labels": r[2]}) for r in data[:16]
    ]
    write_records(d / "a.tfrecords", recs)
    p = params(d, data_processor="GptTfRecordsProcessor")
    assert refused(p) == (
        f"TFRecord file {d / 'a.tfrecords'} record 12 has an all-zero input_mask (no position "
        "to learn from: it would train at loss 0); drop it or re-create the data."
    )


def test_the_wording_of_workers_streamers_and_sources(tmp_path, caplog, monkeypatch):
    from cs2sim.runtime.job.remote_stream import for_streamers

    d = tmp_path / "h5"
    for k, n in enumerate((24, 16)):
        write(d / f"examples_{k}_0.h5", rows(n, seed=k), gz=k == 0)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    with caplog.at_level(logging.INFO, logger="cs2sim.data"):
        s = build_input(for_streamers(params(d), "train", 5), "train", "gpt2", 1)
    s.close()
    assert "num_workers" not in caplog.text  # the user set none: 5 streamers are not workers
    assert "40 samples of 2 files cut into 5 contiguous parts of 8 samples" in caplog.text
    assert "entries sharded" not in caplog.text
    assert s.source.startswith(f"2 HDF5 files (.h5) in {d} (40 samples)")
    one = tmp_path / "one"
    write(one / "examples_0_0.h5", rows(8), gz=False)
    with build_input(params(one), "train", "gpt2", 1) as s1:
        assert s1.source.startswith(f"1 HDF5 file (.h5) in {one}") and "files) files" not in (
            s1.source
        )


def test_preprocessing_names_files_as_the_model_zoo_writes_them(tmp_path):
    from cs2sim.runtime.data.preprocess import GptHdf5Args, write_gpt_hdf5

    raw = tmp_path / "raw"
    raw.mkdir()
    for k in range(3):
        (raw / f"doc{k}.txt").write_text("the cat sat on the mat. " * 40)
    write_gpt_hdf5(
        GptHdf5Args(str(raw), str(tmp_path / "out"), max_seq_length=32, files_per_record=8)
    )
    names = sorted(p.name for p in (tmp_path / "out").glob("*.h5"))
    assert names and names[0] == "examples_0_0.h5"
    assert all(n.startswith("examples_") and n.endswith("_0.h5") for n in names)
