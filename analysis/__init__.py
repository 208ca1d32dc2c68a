"""Analysis of sweeps: run directories (shared/docs/run_contract.md) to comparison tables and figures.

One topic per module; importing this package imports none of them (the contract checker stays light):

- :mod:`analysis.contract` — ``check_run_dir(run_dir) -> list[str]``, ``python -m analysis.contract``
- :mod:`analysis.load` — ``load_sweep(sweep_dir) -> Sweep`` (pandas frames; raises ``SweepError``)
- :mod:`analysis.stats` — mean@k, standard errors, bootstrap, sign-flip test, pass@k, moving average
- :mod:`analysis.tables` — comparison, seed aggregates, paired, pass@k, curve and per-problem tables
- :mod:`analysis.plots` — eval_curves, train_curves, per_problem figures
- :mod:`analysis.report` — ``build_report`` / ``write_report``; ``python -m analysis SWEEP_DIR``
- :mod:`analysis.synthetic` — synthetic run directories for tests, the benchmark and demos
"""
