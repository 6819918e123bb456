"""cs2sim-preprocess: turn raw text into the datasets the Model Zoo's data processors read.

    cs2sim-preprocess gpt2-hdf5 --input_dir RAW --output_dir OUT [--max_seq_length 2048]
        [--files_per_record 50000] [--tokenizer_type GPT2Tokenizer] [--vocab_file BPE]
        [--encoder_file JSON] [--eos_id 50256] [--pad_id 50256] [--seed 0]
        [--short_seq_prob 0] [--output_name examples] [--jsonl_key text]
    cs2sim-preprocess bert-csv --input_dir RAW --output_dir OUT --vocab_file VOCAB
        [--max_seq_length 128] [--do_lower_case | --no-do_lower_case] [--files_per_record N]
        [--seed 0] [--output_name examples]

(also `python -m cs2sim.scripts.preprocess ...`). The flags are those of the Model Zoo's
create_hdf5_dataset.py; what is written is described in runtime/data/preprocess.py. Point a
config's train_input.data_dir at OUT with data_processor GptHDF5DataProcessor (or
BertCSVDynamicMaskDataProcessor and the same vocab_file).
"""

from __future__ import annotations

import argparse
import sys

from cs2sim.runtime.data.preprocess import (
    BertCsvArgs,
    GptHdf5Args,
    write_bert_csv,
    write_gpt_hdf5,
)
from cs2sim.system.errors import CsError

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    """The command line (one sub-command per output format)."""
    p = argparse.ArgumentParser(prog="cs2sim-preprocess", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="format", required=True)
    g = sub.add_parser("gpt2-hdf5", help="raw text -> GPT HDF5 (GptHDF5DataProcessor)")
    d = GptHdf5Args("", "")
    g.add_argument("--input_dir", required=True, help="directory of .txt / .jsonl files")
    g.add_argument("--output_dir", required=True)
    for name, kind in (
        ("max_seq_length", int),
        ("files_per_record", int),
        ("tokenizer_type", str),
        ("vocab_file", str),
        ("encoder_file", str),
        ("eos_id", int),
        ("pad_id", int),
        ("seed", int),
        ("short_seq_prob", float),
        ("output_name", str),
        ("jsonl_key", str),
    ):
        g.add_argument(
            f"--{name}", type=kind, default=getattr(d, name), help=f"default: {getattr(d, name)}"
        )
    b = sub.add_parser("bert-csv", help="raw text -> BERT CSV (BertCSVDynamicMaskDataProcessor)")
    bd = BertCsvArgs("", "", "")
    b.add_argument(
        "--input_dir",
        required=True,
        help="directory of .txt files, one sentence a line, documents separated by blank lines",
    )
    b.add_argument("--output_dir", required=True)
    b.add_argument("--vocab_file", required=True, help="WordPiece vocabulary, one token a line")
    for name in ("max_seq_length", "files_per_record", "seed"):
        b.add_argument(f"--{name}", type=int, default=getattr(bd, name))
    b.add_argument("--output_name", default=bd.output_name)
    b.add_argument("--do_lower_case", action=argparse.BooleanOptionalAction, default=True)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command; errors are one line on stderr."""
    args = vars(parser().parse_args(argv))
    fmt = args.pop("format")
    try:
        if fmt == "gpt2-hdf5":
            done = write_gpt_hdf5(GptHdf5Args(**args))
            what = f"{done.samples} samples of {args['max_seq_length']} tokens"
        else:
            done = write_bert_csv(BertCsvArgs(**args))
            what = f"{done.samples} sentence pairs"
    except CsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            "error: interrupted; the files written so far are complete, the rest are not there.",
            file=sys.stderr,
        )
        return 130
    print(
        f"Wrote {what} in {len(done.files)} file{'' if len(done.files) == 1 else 's'} to "
        f"{args['output_dir']} from {done.documents} documents ({done.tokens} tokens, "
        f"{done.tokens_per_sec:,.0f} tokens/s on this host)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
