"""runtime/cli: the run.py front end, the one part of runtime/ that prints.

    main.py         `main(model, argv) -> exit code`: Model Zoo's run.py flags, then one of the
                    modes below (every run.py calls it)
    flags.py        the run.py flags themselves: the parser, the combinations run.py refuses,
                    where a run's params file is found, the runconfig values they set
    runlog.py       console and file output of a run (the run's log in model_dir)
    compile_run.py  the `--validate_only` / `--compile_only` modes, with a progress bar
    input_analyzer.py   cs_input_analyzer's analysis: compile, measure the input workers,
                        recommend a layout (prints nothing)
    analyzer_report.py  cs_input_analyzer's progress lines and text report

May import every other part of runtime/ (job/, training/, compiler/, ...) and system/.
Only the models' run.py files (runtime/modelzoo/) and scripts/ import it.
"""
