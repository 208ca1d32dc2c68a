"""The time of a step and of an experiment, from first principles (an estimate; docs/capacity.md).

Every figure rests on the :class:`~runners.config.schema.TimeAssumptions` (``backend.capacity.time``), the :class:`EngineCosts`
(issue 43's assumptions, declared here only) and the GPU preset's intra-node :class:`Link`, which the plan
reports beside it:

* **response lengths** (:class:`Lengths`): a stated share of the responses reaches the cap ``R``, the rest
  are uniform with the mean that makes the overall mean the stated one; evaluation has its own mean and
  share at the cap (a thinking model's answers on AIME often run to the cap);
* **a replica's load** (:class:`ReplicaLoad`, the one structure of a step under separate_async that the
  preemption check reads too): its share of a step's sequences, the requests in flight (``(1 + max_staleness)``
  shares, at most ``max_num_seqs``), those decoding at once (what the KV cache holds at the mean length);
* **generation** on one vLLM replica (``TP`` GPUs): a prefill of the prompts at ``2 N`` FLOPs per token and the
  prefill efficiency, plus its all-reduces; then decode iterations. Under separate_async the replicas decode
  continuously (a step costs its tokens at the replica's throughput, ``share x mean / decoding`` iterations:
  the next steps' requests fill the slots of finished ones); on one shared GPU a step is one batch that lasts
  until its **longest** response (``(share - B) x mean / B + longest``). Each iteration costs: the weights and
  the live sequences' KV cache read at the mean context of a decoded token (``(P m + E[r^2] / 2) / m``) at the
  bandwidth efficiency, or ``2 N live / TP`` FLOPs, whichever is slower; **tensor parallelism's all-reduces**,
  two per layer of the live rows' bf16 hidden states over the intra-node link (:func:`all_reduce_seconds`:
  NVLink, or PCIe without peer-to-peer on GeForce cards); **the sampler's log-prob path**, fp32 passes over
  the live rows' logits (the log-softmax every arm asks for in bypass mode, and the top-k of an SC arm's
  head); **the engine's overhead** per iteration (scheduler, input and output processing);
* **training**: the FLOPs of verl's own counter (``verl/utils/flops_counter.py``, the one behind the logged
  ``perf/mfu/actor``): ``6 (L (3 h I + h (2 q + 2 kv)) + 2 V h)`` per token (the embedding and the LM head
  both counted, tied or not; gradient checkpointing's recomputation **not** counted) plus ``6 q L s^2`` per
  sequence of ``s`` tokens, over the trainer GPUs at ``train_mfu`` -- so ``train_mfu`` is exactly what verl
  logs as ``perf/mfu/actor`` and a value copied from a run's log means the same here; with FSDP2's CPU
  offload, per micro-batch the fp32 shards come in twice (forward, backward) and the gradients go out
  (``12 N / D`` bytes over the host link), and AdamW runs on the host; with Ulysses sequence parallelism, four
  all-to-alls per layer (q, k, v in, the output back) in the forward, the backward and the recomputation
  (:func:`all_to_all_seconds`);
* **weight sync**: the bf16 weights over the trainer-to-vLLM link, once per step (across nodes at most the
  link between them, and FSDP's collectives over that link on the trainer's side:
  :mod:`runners.capacity.nodes`); **the SC head**: its bytes per response token through verl's transfer path;
* **a step**: separate_async overlaps generation with training, so a step takes the slower side; on one GPU
  shared by both they run one after the other;
* **evaluation**: the evaluation sets x ``eval.n`` samples generated as one batch until its longest, at
  evaluation's own lengths, before training and every ``test_freq`` steps, while training waits;
* **lengths over training** (:class:`LengthTrajectory`): the experiment's steps start at an early shape (the
  published Qwen3-4B run's: 46% at the cap) and move to the config's over the first ``settle_steps``;
* **the bill** (:func:`bill_seconds`): a start-up per attempt, restarts that each lose the steps since the
  last checkpoint, the checkpoints' write time;
* **the range** (:func:`range_ends`): from every response a quarter of the cap, the fast end's overhead and no
  restart, to every response at the cap, the slow end's decode and the most restarts.

The links are passed as :class:`Link` values (``Hardware.intra_node_link``); a link between nodes is a second
:class:`Link` for the same collective functions.
"""

from __future__ import annotations

import dataclasses
import math

from runners.capacity import nodes
from runners.capacity.nodes import Nodes
from runners.config.model_shapes import ModelShape
from runners.config.schema import TimeAssumptions


def train_lengths(ta: TimeAssumptions, cap: int) -> Lengths:
    """Training's response lengths under ``ta`` for a cap of ``cap`` tokens."""
    return Lengths(cap, ta.mean_response_fraction, ta.response_at_cap_fraction)


def eval_lengths(ta: TimeAssumptions, cap: int) -> Lengths:
    """Evaluation's response lengths under ``ta`` (its own mean and share at the cap) for a cap of ``cap`` tokens."""
    return Lengths(cap, ta.eval_mean_response_fraction, ta.eval_response_at_cap_fraction)


@dataclasses.dataclass(frozen=True)
class Lengths:
    """Response lengths of one generation: ``at_cap_fraction`` of them at the ``cap``, the rest uniform on
    ``[low, high]`` (``high = min(cap, 2 m)``, ``low = 2 m - high``, ``m`` their mean) so that the overall
    mean is ``mean_fraction x cap``. ``ValueError`` where no such lengths exist (more at the cap than the
    mean allows)."""

    cap: int
    mean_fraction: float
    at_cap_fraction: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.at_cap_fraction <= self.mean_fraction <= 1:
            raise ValueError(f"a response share of {self.at_cap_fraction:g} at the cap needs a mean of at least "
                             f"{self.at_cap_fraction:g} of the cap, not {self.mean_fraction:g}")

    @property
    def mean(self) -> float:
        return self.mean_fraction * self.cap

    def _rest(self) -> tuple[float, float]:
        """``(low, high)`` of the responses below the cap."""
        f = self.at_cap_fraction
        m = (self.mean - f * self.cap) / (1 - f) if f < 1 else float(self.cap)
        high = min(float(self.cap), 2 * m)
        return 2 * m - high, high

    def longest(self, count: int) -> float:
        """The expected longest of ``count`` responses: the cap where one of them reaches it (``1 - (1 - f)^count``),
        else the largest of ``count`` uniform draws, ``high - (high - low) / (count + 1)``."""
        low, high = self._rest()
        below = high - (high - low) / (count + 1)
        p_cap = 1 - (1 - self.at_cap_fraction) ** max(count, 1)
        return p_cap * self.cap + (1 - p_cap) * below

    def decode_context(self, prompt: float) -> float:
        """The mean context a decoded token attends to, ``(P m + E[r^2] / 2) / m``: long responses decode more
        tokens, each at a longer context, than the mean length says (``P + m / 2`` where all are equal)."""
        if self.mean <= 0:
            return prompt
        return (self.mean_square_sequence(prompt) - prompt ** 2) / (2 * self.mean)

    def mean_square_sequence(self, prompt: float) -> float:
        """``E[(prompt + response)^2]`` (attention's FLOPs grow with it)."""
        low, high = self._rest()
        f = self.at_cap_fraction
        rest_mean = (low + high) / 2
        rest = (prompt + rest_mean) ** 2 + (high - low) ** 2 / 12
        return f * (prompt + self.cap) ** 2 + (1 - f) * rest


@dataclasses.dataclass(frozen=True)
class Workload:
    """What one step and one experiment generate and train (from the launch config)."""

    prompts_per_step: int
    n: int
    max_prompt_length: int
    max_response_length: int
    total_steps: int
    test_freq: int
    eval_prompts: int  # the evaluation sets' problems together
    eval_n: int
    gradient_checkpointing: bool
    tokens_per_micro_batch: int
    offload_policy: bool = False  # FSDP2's CPU offload: shards copied in and out per micro-batch, AdamW on the host
    head_bytes_per_token: int = 0  # the SC head in transit (0: no head)
    save_freq: int = 0  # trainer.save_freq (0: no checkpoints)
    checkpoint_bytes: float = 0.0  # one checkpoint (runners.capacity.disk)


@dataclasses.dataclass(frozen=True)
class Link:
    """A link the GPUs of a launch talk over: bytes per second in one direction and the latency of one collective
    step. The intra-node link is the GPU preset's (``gpu.intra_node_link``: NVLink, or PCIe with or without
    peer-to-peer); a second link (between nodes) is a second :class:`Link` passed to the same functions."""

    name: str
    bytes_per_s: float
    latency_s: float


def all_reduce_seconds(message_bytes: float, ranks: int, link: Link) -> float:
    """A ring all-reduce of ``message_bytes`` over ``ranks`` GPUs: ``2 (n - 1) / n`` of the message over the link
    and ``2 (n - 1)`` latencies (NCCL's ring; 0 on one GPU)."""
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) / ranks * message_bytes / link.bytes_per_s + 2 * (ranks - 1) * link.latency_s


def all_to_all_seconds(message_bytes: float, ranks: int, link: Link) -> float:
    """An all-to-all of ``message_bytes`` per rank over ``ranks`` GPUs: ``(n - 1) / n`` of it leaves each rank,
    ``n - 1`` latencies (Ulysses' attention-head/sequence exchange; 0 on one GPU)."""
    if ranks <= 1:
        return 0.0
    return (ranks - 1) / ranks * message_bytes / link.bytes_per_s + (ranks - 1) * link.latency_s


@dataclasses.dataclass(frozen=True)
class EngineCosts:
    """The time assumptions added by issue 43, in this one place (not yaml keys: the plan prints them, and
    ``--from-run`` fits the decode speed that absorbs their error, ``decode_bandwidth_efficiency``).

    * ``decode_iteration_overhead_s``: a vLLM engine's CPU time per decode iteration that the GPU waits for
      (scheduler, input preparation, output processing and detokenisation; vLLM V1 overlaps part of it);
      an assumption, set so the published runs fall inside the plan's band (docs/capacity.md);
    * ``sampler_passes``: fp32 passes over a decoded row's ``V`` logits in vLLM's sampler (the logits' upcast,
      temperature, softmax, the sample, the log-softmax of ``logprobs_mode=processed_logprobs`` that every arm
      asks for in bypass mode), each memory-bound; ``top_k_passes`` more for an SC arm's top-k head;
    * ``startup_s``: per attempt, before the first step: Ray, the trainer's weights and FSDP wrap, vLLM's load,
      profiling and CUDA-graph capture, the first weight sync (the evaluation before training is counted apart);
    * ``restarts_low`` / ``restarts_high``: restarts per arm (the SC reproduction resumed twice);
    * ``checkpoint_write_bytes_per_s``: a checkpoint's bytes to the run's disk (network volumes of rented
      machines write 0.2-1 GB/s);
    * the range's ends (:func:`length_range`): the slow end decodes at ``slow_end_decode_efficiency`` of the
      assumed bandwidth efficiency with ``slow_end_overhead`` x the overhead (consumer GPUs, small batches at
      long contexts: the 8 x RTX 4090 run), the fast end with ``fast_end_overhead`` x the overhead."""

    decode_iteration_overhead_s: float = 2e-3
    sampler_passes: float = 6.0
    top_k_passes: float = 2.0
    startup_s: float = 600.0
    restarts_low: float = 0.0
    restarts_high: float = 2.0
    checkpoint_write_bytes_per_s: float = 0.5e9
    slow_end_decode_efficiency: float = 0.5  # the range's slow end: decode_bandwidth_efficiency times this
    slow_end_overhead: float = 2.0  # and the per-iteration overhead times this
    fast_end_overhead: float = 0.5  # the fast end: the overhead times this


@dataclasses.dataclass(frozen=True)
class LengthTrajectory:
    """Response lengths over training instead of one fixed shape (issue 43's assumption, declared here only):
    training starts at ``early_mean_response_fraction`` of the cap with ``early_response_at_cap_fraction`` of the
    responses at it and moves linearly to the config's shape (``backend.capacity.time``) over the first
    ``settle_steps`` steps. The defaults are the one published Qwen3-4B run at 8,192 tokens (8 x RTX 4090, same
    data): about 46% of the responses at the cap early, 21% at iteration 120 (its mean is not published: 0.7
    assumed)."""

    early_mean_response_fraction: float = 0.7
    early_response_at_cap_fraction: float = 0.46
    settle_steps: int = 120


#: The lengths over training every plan's point estimate uses.
TRAJECTORY = LengthTrajectory()
#: Points at which the move from the early shape to the config's is evaluated (midpoints of equal parts).
RAMP_POINTS = 4


#: The engine costs every plan uses (the one declaration of issue 43's assumptions).
ENGINE = EngineCosts()
#: No engine costs at all: the bandwidth-and-FLOPs model of before issue 43 (tests by hand).
NO_ENGINE_COSTS = EngineCosts(decode_iteration_overhead_s=0.0, sampler_passes=0.0, top_k_passes=0.0, startup_s=0.0,
                              restarts_low=0.0, restarts_high=0.0, checkpoint_write_bytes_per_s=math.inf,
                              slow_end_decode_efficiency=1.0, slow_end_overhead=1.0, fast_end_overhead=1.0)


@dataclasses.dataclass(frozen=True)
class Hardware:
    """The GPUs of a launch and how the rollout uses them."""

    bandwidth_bytes_per_s: float
    bf16_flops: float
    trainer_gpus: int
    rollout_gpus: int
    tensor_parallel: int
    shared_gpu: bool  # trainer and vLLM on the same GPUs: no overlap, the GPUs counted once
    weights_bytes_per_rank: int
    kv_bytes_per_token: int
    kv_capacity_tokens: int
    max_num_seqs: int
    intra_node_link: Link  # the GPUs of a node: tensor parallelism's all-reduces, Ulysses' all-to-alls
    max_staleness: int = 0  # separate_async: steps the rollout may run ahead (rollout.max_staleness)
    sequence_parallel: int = 1  # Ulysses sequence parallelism of the trainer
    top_k: int = 0  # an SC arm's head size (the sampler's top-k pass)
    nodes: Nodes | None = None  # the launch's nodes and the link between them (None: one node)


@dataclasses.dataclass(frozen=True)
class ReplicaLoad:
    """One vLLM replica under separate_async: the one structure the time and the preemption check share.

    The trainer consumes one step's batch (``share`` sequences per replica) per step; the rollout runs up to
    ``max_staleness`` steps ahead, so the agent loop keeps up to ``(1 + max_staleness) x share`` requests in
    flight, at most ``max_num_seqs`` (``requests``); of them the KV cache lets ``decoding`` decode at once at the
    mean sequence length (the rest wait), and ``held_at_full_length`` at full length: below ``requests`` vLLM
    preempts as responses grow. A shared GPU runs one step's batch at a time (no steps ahead)."""

    share: int
    requests: int
    decoding: int
    held_at_full_length: int

    @property
    def preempts(self) -> bool:
        return self.requests > self.held_at_full_length


def replica_load(sequences: int, hw: Hardware, mean_sequence: float, full_sequence: float) -> ReplicaLoad:
    """:class:`ReplicaLoad` of ``sequences`` per step spread over the replicas."""
    replicas = max(hw.rollout_gpus // hw.tensor_parallel, 1)
    share = math.ceil(sequences / replicas)
    ahead = 0 if hw.shared_gpu else hw.max_staleness
    requests = max(1, min(hw.max_num_seqs, share * (1 + ahead)))
    fits = int(hw.kv_capacity_tokens // max(mean_sequence, 1))
    full = int(hw.kv_capacity_tokens // max(full_sequence, 1))
    return ReplicaLoad(share=share, requests=requests, decoding=max(1, min(requests, fits)), held_at_full_length=full)


def generation(shape: ModelShape, sequences: int, prompt: float, response: float, hw: Hardware,
               ta: TimeAssumptions, longest: float | None = None, context: float | None = None,
               costs: EngineCosts = ENGINE, pipelined: bool = False, cap: float | None = None) -> dict[str, float]:
    """Seconds to generate ``sequences`` responses of mean length ``response`` (the longest ``longest``; None:
    all of the mean length) to prompts of ``prompt`` tokens (the module docstring); ``context``: the mean
    context a decoded token attends to (None: ``prompt + response / 2``, lengths all equal). ``pipelined``: the
    rollout of separate_async, which keeps decoding the next steps' requests, so a step costs its tokens at the
    replica's throughput and no drain of the longest response (:class:`ReplicaLoad`); else one batch that lasts
    until its longest response. ``cap``: the full response length (the preemption check's sequence)."""
    longest = response if longest is None else max(longest, response)
    full = prompt + (cap if cap is not None else longest)
    load = replica_load(sequences, hw, prompt + response, full)
    share = load.share
    batch = load.decoding if pipelined else max(1, min(share, load.decoding))
    waves = math.ceil(share / batch)
    iterations = share * response / batch if pipelined else max(share - batch, 0) * response / batch + longest
    live = share * response / iterations if iterations > 0 else 0.0
    context = prompt + response / 2 if context is None else context
    rank_flops = hw.bf16_flops * ta.prefill_mfu
    bandwidth = hw.bandwidth_bytes_per_s * ta.decode_bandwidth_efficiency
    read = hw.weights_bytes_per_rank + live * context * hw.kv_bytes_per_token
    memory_or_flops = max(read / bandwidth, 2 * shape.parameters * live / hw.tensor_parallel / rank_flops)
    # tensor parallelism: two all-reduces per layer (attention and MLP outputs) of the live rows' bf16 hidden states
    collectives = 2 * shape.num_hidden_layers * all_reduce_seconds(
        live * shape.hidden_size * 2, hw.tensor_parallel, hw.intra_node_link)
    passes = costs.sampler_passes + (costs.top_k_passes if hw.top_k else 0)
    sampler = live * shape.vocab_size * 4 * passes / hw.tensor_parallel / bandwidth
    per_iteration = memory_or_flops + collectives + sampler + costs.decode_iteration_overhead_s
    prefill_tokens = prompt * share
    prefill = (2 * shape.parameters * prefill_tokens / hw.tensor_parallel / rank_flops
               + 2 * shape.num_hidden_layers * all_reduce_seconds(prefill_tokens * shape.hidden_size * 2,
                                                                  hw.tensor_parallel, hw.intra_node_link))
    decode = iterations * per_iteration
    return {"seconds": prefill + decode, "prefill_seconds": prefill, "decode_seconds": decode,
            "concurrent_sequences_per_replica": batch, "waves": waves, "decode_iterations": iterations,
            "longest_response_tokens": longest if not pipelined else response,
            "decode_iteration_seconds": per_iteration,
            "decode_iteration_parts": {"memory_or_flops": memory_or_flops, "tp_all_reduce": collectives,
                                       "sampler": sampler, "engine_overhead": costs.decode_iteration_overhead_s},
            "requests_per_replica": load.requests, "pipelined": pipelined}


def verl_flops(shape: ModelShape, tokens: float, square_tokens: float) -> float:
    """Training FLOPs as verl 0.9.1 counts them for ``perf/mfu/actor`` (``_estimate_qwen2_flops``, which Qwen3
    uses): ``6 x dense x tokens + 6 x sum(s^2) x head_dim x attention_heads x L``, ``dense = L (3 h I + h (q + 2 kv + q))
    + 2 V h``; ``square_tokens`` is the sum of the sequences' squared lengths."""
    h = shape.hidden_size
    dense = (shape.num_hidden_layers * (3 * h * shape.intermediate_size + h * (2 * shape.q_dim + 2 * shape.kv_dim))
             + 2 * shape.vocab_size * h)
    return 6 * dense * tokens + 6 * square_tokens * shape.q_dim * shape.num_hidden_layers


def training_flops(shape: ModelShape, sequences: int, tokens_per_sequence: float, checkpointing: bool) -> float:
    """The FLOPs the GPUs execute (hardware FLOPs: the recomputation of gradient checkpointing counted, ``8 N``
    instead of ``6 N``); the time uses :func:`verl_flops`, the convention of ``train_mfu``."""
    matrices = shape.num_hidden_layers * shape.layer_parameters + shape.embedding_parameters
    passes = 4 if checkpointing else 3  # forward, backward (2x), recomputed forward
    dense = 2 * passes * matrices * tokens_per_sequence * sequences
    attention = passes * 2 * shape.q_dim * shape.num_hidden_layers * tokens_per_sequence ** 2 * sequences
    return dense + attention


def step_and_experiment(shape: ModelShape, work: Workload, hw: Hardware, ta: TimeAssumptions,
                        costs: EngineCosts = ENGINE, restarts: float | None = None,
                        lost_fraction: float = 0.5, trajectory: LengthTrajectory | None = TRAJECTORY) -> dict:
    """The estimate: a step's parts, ``step_seconds``, the evaluations, the bill (start-up per attempt,
    ``restarts`` -- None: the middle of ``costs``' range --, each losing ``lost_fraction`` of ``save_freq`` steps,
    the checkpoints' write time), ``total_hours``, ``gpu_hours_per_arm``. ``step_seconds`` is a step at the
    config's lengths; the experiment's train steps follow ``trajectory`` (:class:`LengthTrajectory`; None: the
    config's lengths from the first step).

    A step under separate_async (not a shared GPU): the rollout decodes continuously with the requests in flight
    of :class:`ReplicaLoad` (no drain: the next steps' requests fill the slots), the trainer trains the batch the
    replay buffer hands it, and a step takes the slower of the two; on one shared GPU a step generates one batch
    until its longest response, then trains."""
    prompt = ta.mean_prompt_fraction * work.max_prompt_length
    lengths = train_lengths(ta, work.max_response_length)
    eval_set_lengths = eval_lengths(ta, work.max_response_length)
    response = lengths.mean
    sequences = work.prompts_per_step * work.n
    pipelined = not hw.shared_gpu
    gen = generation(shape, sequences, prompt, response, hw, ta, longest=lengths.longest(sequences),
                     context=lengths.decode_context(prompt), costs=costs, pipelined=pipelined,
                     cap=work.max_response_length)
    tokens = sequences * (prompt + response)
    train = verl_flops(shape, tokens, sequences * lengths.mean_square_sequence(prompt)) / (
        hw.trainer_gpus * hw.bf16_flops * ta.train_mfu)
    micro_batches = math.ceil(tokens / hw.trainer_gpus / work.tokens_per_micro_batch)
    offload = 0.0
    if work.offload_policy:  # per micro-batch: fp32 shards in for the forward and the backward, gradients out
        shard = shape.parameters / hw.trainer_gpus
        offload = micro_batches * 12 * shard / ta.host_link_bytes_per_s + shard / ta.host_optimizer_params_per_s
    sequence_parallel = 0.0
    if hw.sequence_parallel > 1:  # Ulysses: q, k, v in and the output back, per layer, forward, backward, recompute
        passes = 3 if work.gradient_checkpointing else 2
        per_micro_batch = tokens / hw.trainer_gpus / micro_batches * (2 * shape.q_dim + 2 * shape.kv_dim) * 2 / 4
        sequence_parallel = 4 * shape.num_hidden_layers * passes * micro_batches * all_to_all_seconds(
            per_micro_batch, hw.sequence_parallel, hw.intra_node_link)
    train += offload + sequence_parallel
    sync_rate, collectives = ta.weight_sync_bytes_per_s, 0.0
    if hw.nodes is not None:  # across nodes (runners/capacity/nodes.py): FSDP's collectives and the sync over the link
        sync_rate = nodes.weight_sync_bytes_per_s(sync_rate, hw.nodes)
        collectives = nodes.fsdp_internode_seconds(shape.parameters, hw.trainer_gpus, nodes.micro_batches(
            sequences, prompt + response, hw.trainer_gpus, work.tokens_per_micro_batch), hw.nodes)
    sync = 2 * shape.parameters / sync_rate
    head = sequences * response * work.head_bytes_per_token / ta.head_transport_bytes_per_s
    rollout_side, trainer_side = gen["seconds"] + head, train + sync + collectives
    step = rollout_side + trainer_side if hw.shared_gpu else max(rollout_side, trainer_side)
    eval_sequences = work.eval_prompts * work.eval_n
    evaluation = generation(shape, eval_sequences, prompt, eval_set_lengths.mean, hw, ta,
                            longest=eval_set_lengths.longest(eval_sequences),
                            context=eval_set_lengths.decode_context(prompt),
                            costs=costs)
    evaluations = work.total_steps // work.test_freq + 1 if work.test_freq > 0 else 1
    bill = bill_seconds(work, step, costs, restarts, lost_fraction)
    steps_seconds, early_step = work.total_steps * step, None
    if trajectory is not None and work.total_steps > 0:
        ramp = min(trajectory.settle_steps, work.total_steps)
        early = (trajectory.early_mean_response_fraction, trajectory.early_response_at_cap_fraction)
        ramp_seconds = 0.0
        for k in range(RAMP_POINTS):
            w = (k + 0.5) / RAMP_POINTS  # 0: the early shape, 1: the config's
            t = dataclasses.replace(ta, mean_response_fraction=early[0] + (ta.mean_response_fraction - early[0]) * w,
                                    response_at_cap_fraction=early[1] + (ta.response_at_cap_fraction - early[1]) * w)
            ramp_seconds += ramp / RAMP_POINTS * step_and_experiment(shape, work, hw, t, costs, restarts, lost_fraction,
                                                                     trajectory=None)["step_seconds"]
        early_step = step_and_experiment(shape, work, hw, dataclasses.replace(
            ta, mean_response_fraction=early[0], response_at_cap_fraction=early[1]), costs, trajectory=None)["step_seconds"]
        steps_seconds = ramp_seconds + (work.total_steps - ramp) * step
    total = steps_seconds + evaluations * evaluation["seconds"] + bill["seconds"]
    gpus = hw.trainer_gpus if hw.shared_gpu else hw.trainer_gpus + hw.rollout_gpus
    return {"step_seconds": step, "bound_by": "rollout" if rollout_side >= trainer_side else "trainer",
            "generation": gen, "train_seconds": train, "offload_seconds": offload,
            "sequence_parallel_seconds": sequence_parallel, "weight_sync_seconds": sync,
            "internode_collective_seconds": collectives,
            "sc_head_seconds": head, "mean_prompt_tokens": prompt, "mean_response_tokens": response,
            "longest_response_tokens": gen["longest_response_tokens"],
            "eval_mean_response_tokens": eval_set_lengths.mean,
            "eval_longest_response_tokens": evaluation["longest_response_tokens"],
            "evaluation_seconds": evaluation["seconds"], "evaluations": evaluations, "bill": bill,
            "train_steps_seconds": steps_seconds, "early_step_seconds": early_step,
            "lengths_over_training": None if trajectory is None else dataclasses.asdict(trajectory),
            "total_hours": total / 3600, "gpus": gpus, "gpu_hours_per_arm": total / 3600 * gpus}


def bill_seconds(work: Workload, step: float, costs: EngineCosts, restarts: float | None = None,
                 lost_fraction: float = 0.5) -> dict[str, float]:
    """What a run costs beyond its steps and evaluations: ``(1 + restarts)`` start-ups, each restart losing
    ``lost_fraction x save_freq`` steps since the last checkpoint (half on average; every step since the last
    save at worst; without checkpoints the whole run so far, counted as half the run), and the checkpoints'
    write time (``saves x bytes / write rate``, the steps wait for it)."""
    restarts = (costs.restarts_low + costs.restarts_high) / 2 if restarts is None else restarts
    saves = 0  # verl's saves: every save_freq steps and at the last step (runners.capacity.disk.saves)
    if work.save_freq > 0 and work.total_steps > 0:
        saves = work.total_steps // work.save_freq + (1 if work.total_steps % work.save_freq else 0)
    span = work.save_freq if work.save_freq > 0 else work.total_steps
    lost = restarts * lost_fraction * min(span, work.total_steps) * step
    write = saves * work.checkpoint_bytes / costs.checkpoint_write_bytes_per_s if work.checkpoint_bytes else 0.0
    startup = (1 + restarts) * costs.startup_s
    return {"startup_seconds": startup, "restarts": restarts, "lost_work_seconds": lost,
            "checkpoint_write_seconds": write, "saves": saves, "seconds": startup + lost + write}


#: The length assumptions of a plan's range: every response short (a quarter of the cap, none at it) and
#: every response at the cap, in training and in evaluation.
LENGTH_RANGE = ((0.25, 0.0), (1.0, 1.0))


def range_ends(ta: TimeAssumptions, costs: EngineCosts = ENGINE) -> dict[str, tuple[TimeAssumptions, EngineCosts]]:
    """The assumptions of the range's two ends: ``low`` every response short, the fast end's overhead, the
    fewest restarts; ``high`` every response at the cap, the slow end's decode and overhead, the most restarts
    (:class:`EngineCosts`)."""
    out = {}
    for end, (mean, at_cap) in zip(("low", "high"), LENGTH_RANGE, strict=True):
        t = dataclasses.replace(ta, mean_response_fraction=mean, response_at_cap_fraction=at_cap,
                                eval_mean_response_fraction=mean, eval_response_at_cap_fraction=at_cap)
        if end == "high":
            t = dataclasses.replace(t, decode_bandwidth_efficiency=ta.decode_bandwidth_efficiency
                                    * costs.slow_end_decode_efficiency)
        factor = costs.fast_end_overhead if end == "low" else costs.slow_end_overhead
        restarts = costs.restarts_low if end == "low" else costs.restarts_high
        out[end] = (t, dataclasses.replace(costs, decode_iteration_overhead_s=costs.decode_iteration_overhead_s * factor,
                                           restarts_low=restarts, restarts_high=restarts))
    return out


def length_range(shape: ModelShape, work: Workload, hw: Hardware, ta: TimeAssumptions,
                 costs: EngineCosts = ENGINE) -> dict[str, float]:
    """GPU-hours per arm and the step's seconds at the two ends of :func:`range_ends`; a restart at the low end
    loses nothing, at the high end every step since the last save."""
    out = {}
    for end, (t, c) in range_ends(ta, costs).items():
        est = step_and_experiment(shape, work, hw, t, c, lost_fraction=0.0 if end == "low" else 1.0, trajectory=None)
        out[f"{end}_step_seconds"] = est["step_seconds"]
        out[f"{end}_generation_seconds"] = est["generation"]["seconds"]
        out[f"{end}_gpu_hours_per_arm"] = est["gpu_hours_per_arm"]
    return out
