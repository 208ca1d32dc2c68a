"""verl checkpoints of a run: listing, retention, export to BF16 safetensors (:mod:`~runners.verl.checkpoints.store`)
and the export's verification (:mod:`~runners.verl.checkpoints.export_check`). ``python -m runners.verl.checkpoints``
is the command line (``list``, ``retain``, ``export``)."""
