"""Analysis of sweeps: run directories (docs/run_contract.md) to comparison tables and figures.

One topic per module; importing this package imports none of them (the contract checker stays light):

- :mod:`runners.run.contract_check` — ``check_run_dir(run_dir) -> list[str]``, ``python -m runners.run.contract_check``
- :mod:`analysis.load` — ``load_sweep(sweep_dir, strict=False) -> Sweep``: the tidy table of correct counts
  per (run, step, repeat, set, problem) that everything else reads (raises ``SweepError``)
- :mod:`analysis.stats` — problem-level mean@k, standard errors, bootstrap, sign-flip test, pass@k, moving average
- :mod:`analysis.seeds` — two-level (seeds and problems) intervals and tests for methods with >= 2 seeds,
  unpaired and on seed pairs; the minimum detectable difference
- :mod:`analysis.pairing` — whether two arms' runs are seed pairs (from ``run.seed_fixes``), and the test it calls for
- :mod:`analysis.tables` — comparison, seed aggregates, paired, pass@k, curve, test-retest and per-problem tables
- :mod:`analysis.plots` — eval_curves, train_curves, per_problem figures, one line per run with one seed and
  means with bands over seeds (seeds thin) with several
- :mod:`analysis.styles` — how an arm is drawn: colour, dash, marker, width, legend label
- :mod:`analysis.seed_curves` — a method's train curve over its seeds: mean and t band
- :mod:`analysis.coincidence` — which curves of a panel coincide (per run pair, or counted over seeds)
- :mod:`analysis.panel_text` — notes and titles wrapped to their panel's width
- :mod:`analysis.progress` — stage times of a report and a line per stage for long ones
- :mod:`analysis.report` — ``build_report`` / ``write_report``; ``python -m analysis SWEEP_DIR``
- :mod:`analysis.synthetic` — synthetic run directories for tests, the benchmark and demos
"""
