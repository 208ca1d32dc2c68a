"""Imported at ``import verl`` in every process of a score-centering arm.

The launcher names this module in ``VERL_USE_EXTERNAL_MODULES`` for the verl driver and, through
``ray_kwargs.ray_init.runtime_env.env_vars``, for every Ray actor. Importing it installs the
project's correction into verl's score-centering slot (:func:`runners.verl_side.backend.sc_seam.install`)
or fails loudly, naming the verl commit and install command, where verl lacks the slot.
"""

from runners.verl_side.backend.sc_seam import install

install()
