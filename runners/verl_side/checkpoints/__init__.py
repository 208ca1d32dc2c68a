"""verl checkpoints of a run: listing, retention, export to BF16 safetensors (:mod:`~runners.verl_side.checkpoints.store`)
and the export's verification (:mod:`~runners.verl_side.checkpoints.export_check`). ``python -m runners.verl_side.checkpoints``
is the command line (``list``, ``retain``, ``export``)."""
