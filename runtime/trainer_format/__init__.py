"""The trainer format of today's Model Zoo (Release 2.3+): `rows.py` (the one table of where
each trainer key lives in the legacy sections) and `convert.py` (a trainer file read into the
legacy sections, a legacy file written in the trainer form).

Imports runtime/params.py, runtime/sections.py and runtime/schema.py; imported by runtime/cli
(run.py reads a trainer file) and runtime/zoo (the `cszoo` command). Never prints.
"""
