"""The data preparation's old command: ``python -m ablations.data`` is now ``python -m math_data`` (or ``sca-data``).

The preparation itself is the package :mod:`math_data`; this package only keeps the old command working
(``__main__``), so that the science (``ablations``) does not hold it.
"""
