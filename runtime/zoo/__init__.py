"""The `cszoo` command of today's Model Zoo (Release 2.4+): its parser (`parser.py`), the
runs `fit` / `validate` / `validate_all` on the host or the cluster (`run.py`), the views of
the model and processor tables (`tables.py`), config management (`configs.py`), Hugging Face
checkpoints (`hf_names.py` the one table of names and shapes, `hf_convert.py` the conversion,
`safetensors`' numpy API for the files) and data preprocessing (`preprocess.py`).

Imports runtime/cli (to run as `python run.py` does), runtime/trainer_format, runtime/params,
runtime/registry, runtime/data and runtime/artifacts; nothing in runtime/ imports it.
scripts/cszoo.py is its executable: the one error boundary, and the only place that prints
what these modules return.
"""
