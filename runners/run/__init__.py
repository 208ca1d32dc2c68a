"""The run folder (``results/<sweep>/<run>``, docs/run_contract.md): the only thing analysis reads.

* :mod:`~runners.run.run_contract` -- what a run folder holds, as code (names, patterns, the record's shape);
* :mod:`~runners.run.run_record` -- ``metrics.json``: written atomically, appended step by step;
* :mod:`~runners.run.contract_check` -- does a run folder hold what the contract promises
  (``python -m runners.run.contract_check RUN_DIR``);
* :mod:`~runners.run.run_lock` -- one process at a time per run folder;
* :mod:`~runners.run.run_folder` -- what a launch may do with an existing run folder, and its tidying;
* :mod:`~runners.run.provenance` -- where a run came from (versions, config and file hashes);
* :mod:`~runners.run.peer_keys` -- which keys of a run's config can change a number in the report (who is a peer);
* :mod:`~runners.run.checkpoint_selection` -- the one rule for the "best" checkpoint;
* :mod:`~runners.run.run_error` -- :class:`RunError`, a run that started and stopped, with the reason.
"""
