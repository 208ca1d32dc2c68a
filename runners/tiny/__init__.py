"""The project's tiny model and its tasks, shared by the embedded backend (``runners.embedded``), the rehearsal
(``runners.verl_side.platform.rehearsal.swaps``) and the capacity plan (the rehearsal's model shape).

* :mod:`~runners.tiny.model` -- the tiny Qwen3-architecture policy built from ``conf/model/`` (and its shape);
* :mod:`~runners.tiny.tokenizer` -- the character tokenizer;
* :mod:`~runners.tiny.arithmetic_task` -- the seeded synthetic verifiable math task (``synthetic_arith``)
  and the seeded-task base class;
* :mod:`~runners.tiny.scratchpad_task` -- the scratchpad sum task (``sum_scratchpad``);
* :mod:`~runners.tiny.task_by_name` -- ``data.name`` -> its task;
* :mod:`~runners.tiny.base_model` -- the shipped, hash-verified base model (``assets/``), trained once by
  ``python -m runners.embedded.warmstart --ship``.
"""
