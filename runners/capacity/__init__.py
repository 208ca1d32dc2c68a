"""The capacity plan of a verl launch: GPU memory per trainer and rollout GPU, time and GPU-hours per arm.

Closed-form estimates from the model's shape (:mod:`~runners.config.model_shapes`), the GPU's datasheet
(``conf/gpu/``) and the resolved launch config, term by term, so a user reads before renting whether a
launch fits and what it costs, and a launch that cannot fit is refused before Ray starts:

* :mod:`~runners.capacity.trainer_memory` -- one FSDP2 trainer GPU at its peak (model states, gathered units,
  activations, the logits block and its temporaries, the score-centering head, a reserve);
* :mod:`~runners.capacity.rollout_memory` -- one vLLM GPU (weights per tensor-parallel rank, KV cache per
  token, KV capacity, vLLM's own reserve);
* :mod:`~runners.capacity.timing` -- the time of a step from first principles: decode reads, tensor parallelism's
  all-reduces over the GPU preset's link, the sampler's log-prob path and the engine's overhead per iteration;
  separate_async's continuous decode (one ``ReplicaLoad`` with the preemption check); evaluation at its own
  length; training in verl's FLOP convention with Ulysses' all-to-alls; the bill; the range;
* :mod:`~runners.capacity.disk` -- checkpoints, dumps and the exported model on disk;
* :mod:`~runners.capacity.estimate` -- all of it for one resolved config (and the requests in flight);
* :mod:`~runners.capacity.launch_checks` -- the launcher's checks, for the CLI and for every proposed fix;
* :mod:`~runners.capacity.fixes` -- what a researcher would try on a misfit, each checked and re-planned;
* :mod:`~runners.capacity.plan` -- the plan of a resolved config, ``capacity.json`` / ``capacity.md``
  and the refusal;
* :mod:`~runners.capacity.calibrate` -- the time replanned from a verl run's first steps (``--from-run``): verl
  0.9.1's V1 timers, the decode speed fitted, never a budget below the measurement.

``trainer_memory`` and ``rollout_memory`` (with :mod:`runners.config.model_shapes`) import nothing but the
standard library, so the device check runs them on a machine with torch alone (``benchmarks/device_check/capacity.py``);
``timing`` takes its assumptions as the schema's dataclass (:class:`runners.config.schema.TimeAssumptions`,
``backend.capacity.time``); ``plan`` reads an OmegaConf config. What each term counts and how well it matches torch's own accounting:
docs/capacity.md.
"""
