"""The device check: what the project's trainer math costs on one GPU, with torch and transformers only.

``bash benchmarks/device_check/device_check.sh`` (the borrowed GPU machine) or ``python3 -m benchmarks.device_check``
from the repository root; :mod:`.check` runs the parts (:mod:`.head`, :mod:`.numerics`, :mod:`.model`,
:mod:`.capacity`), :mod:`.measure` holds their clocks and meters, :mod:`.report` writes the outputs
(docs/device_check.md). Importing this package imports nothing.
"""
