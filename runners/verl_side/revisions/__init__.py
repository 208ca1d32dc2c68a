"""What the harness relies on in each verl revision it supports: the facts about verl, one topic per module.

* :mod:`~runners.verl_side.revisions.releases` -- the supported revisions: **0.9.1** (the PyPI pin: the V1
  ``separate_async`` trainer, bypass-mode REINFORCE, token-level IS, no score-centering transport of its
  own, but the slots through which the project carries the sampler's head itself, :mod:`runners.verl_side.head`)
  and **the score-centering commit** (:data:`~runners.verl_side.revisions.releases.SCORE_CENTERING`: 0.9.1 plus verl's own score-centering transport);
* :mod:`~runners.verl_side.revisions.config_facts` -- config keys and defaults every supported revision shares;
* :mod:`~runners.verl_side.revisions.newer_keys` -- what the score-centering verl adds: its config keys and its slot module;
* :mod:`~runners.verl_side.revisions.project_slots` -- what the project plugs into on 0.9.1 to carry the head;
* :mod:`~runners.verl_side.revisions.defects` -- defects of a revision, avoided by the environment;
* :mod:`~runners.verl_side.revisions.installed` -- who carries an SC arm's head on the installed verl, and
  whether that verl has what it relies on (an SC launch stops before anything starts where it does not);
* :mod:`~runners.verl_side.revisions.lookup` -- reading the installed verl without importing it.

What an SC arm's verl config must hold is the backend's check: :mod:`runners.verl_side.backend.sc_requirements`.
Either way the correction that trains is the project's (``ablations.score_centering``). docs/verl_reference.md
prints :func:`~runners.verl_side.revisions.newer_keys.markdown_table` and
:func:`~runners.verl_side.revisions.project_slots.slots_table` (a test keeps them in step). Importing these modules
is cheap; :func:`~runners.verl_side.revisions.installed.check` imports verl.
"""
