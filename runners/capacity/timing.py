"""The time of a step and of an experiment, from first principles (an estimate; docs/capacity.md).

Every figure rests on the :class:`TimeAssumptions`, which the plan reports beside it:

* **response lengths** (:class:`Lengths`): a stated share of the responses reaches the cap ``R``, the rest
  are uniform with the mean that makes the overall mean the stated one; evaluation has its own mean and
  share at the cap (a thinking model's answers on AIME often run to the cap). A step's generation lasts
  until its **longest** response, not its mean one;
* **generation** on one vLLM replica (``TP`` GPUs) holding ``B`` sequences at once (its share of the batch,
  at most ``max_num_seqs`` and what its KV cache holds at the mean length): a prefill of the prompts at
  ``2 N`` FLOPs per token and the prefill efficiency; then decode iterations, continuous batching: ``(share
  - B) x mean / B`` while the slots are full, plus the longest response for the last ones to drain; each
  iteration bound by memory bandwidth (a rank reads its weights and the live sequences' KV cache at the mean
  context of a decoded token, ``(P m + E[r^2] / 2) / m``: ``P + m / 2`` where all lengths are equal) or by FLOPs (``2 N live / TP``), whichever is slower; ``live`` the average
  number of sequences decoding (the response tokens over the iterations);
* **training**: the FLOPs of verl's own counter (``verl/utils/flops_counter.py``, the one behind the logged
  ``perf/mfu/actor``): ``6 (L (3 h I + h (2 q + 2 kv)) + 2 V h)`` per token (the embedding and the LM head
  both counted, tied or not; gradient checkpointing's recomputation **not** counted) plus ``6 q L s^2`` per
  sequence of ``s`` tokens, over the trainer GPUs at ``train_mfu`` -- so ``train_mfu`` is exactly what verl
  logs as ``perf/mfu/actor`` and a value copied from a run's log means the same here; with FSDP2's CPU
  offload, per micro-batch the fp32 shards come in twice (forward, backward) and the gradients go out
  (``12 N / D`` bytes over the host link), and AdamW runs on the host;
* **weight sync**: the bf16 weights over the trainer-to-vLLM link, once per step (across nodes at most the
  link between them, and FSDP's collectives over that link on the trainer's side:
  :mod:`runners.capacity.nodes`); **the SC head**: its bytes per response token through verl's transfer path;
* **a step**: separate_async overlaps generation with training, so a step takes the slower side; on one GPU
  shared by both they run one after the other;
* **evaluation**: the evaluation sets x ``eval.n`` samples generated the same way, at evaluation's own
  lengths, before training and every ``test_freq`` steps, while training waits.
"""

from __future__ import annotations

import dataclasses
import math

from runners.capacity import nodes
from runners.capacity.nodes import Nodes
from runners.capacity.shapes import ModelShape


@dataclasses.dataclass(frozen=True)
class TimeAssumptions:
    """The assumptions of the time estimate (``backend.capacity.time``)."""

    mean_prompt_fraction: float  # mean prompt length / rollout.max_prompt_length
    mean_response_fraction: float  # mean response length / rollout.max_response_length
    train_mfu: float  # verl's perf/mfu/actor: verl's training FLOPs (6N, no recomputation) / (GPUs x dense bf16 rate)
    prefill_mfu: float  # prefill (and compute-bound decode) FLOPs / the rollout GPUs' dense bf16 rate
    decode_bandwidth_efficiency: float  # bytes a decode iteration reads / (memory bandwidth x time)
    weight_sync_bytes_per_s: float  # trainer -> vLLM weight sync
    head_transport_bytes_per_s: float  # the SC head from vLLM to the trainer
    host_link_bytes_per_s: float  # host <-> GPU copies of an offloaded trainer (PCIe)
    host_optimizer_params_per_s: float  # AdamW on the host, parameters per second and process
    response_at_cap_fraction: float = 0.0  # training responses that reach rollout.max_response_length
    eval_mean_response_fraction: float | None = None  # evaluation's mean response / the cap (None: training's)
    eval_response_at_cap_fraction: float | None = None  # evaluation's responses at the cap (None: training's)

    def train_lengths(self, cap: int) -> Lengths:
        return Lengths(cap, self.mean_response_fraction, self.response_at_cap_fraction)

    def eval_lengths(self, cap: int) -> Lengths:
        mean = self.mean_response_fraction if self.eval_mean_response_fraction is None else self.eval_mean_response_fraction
        at_cap = (self.response_at_cap_fraction if self.eval_response_at_cap_fraction is None
                  else self.eval_response_at_cap_fraction)
        return Lengths(cap, mean, at_cap)


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
    nodes: Nodes | None = None  # the launch's nodes and the link between them (None: one node)


def generation(shape: ModelShape, sequences: int, prompt: float, response: float, hw: Hardware,
               ta: TimeAssumptions, longest: float | None = None, context: float | None = None) -> dict[str, float]:
    """Seconds to generate ``sequences`` responses of mean length ``response`` (the longest ``longest``; None:
    all of the mean length) to prompts of ``prompt`` tokens (the module docstring); ``context``: the mean
    context a decoded token attends to (None: ``prompt + response / 2``, lengths all equal)."""
    longest = response if longest is None else max(longest, response)
    replicas = max(hw.rollout_gpus // hw.tensor_parallel, 1)
    share = math.ceil(sequences / replicas)
    fits = int(hw.kv_capacity_tokens // max(prompt + response, 1))
    batch = max(1, min(share, hw.max_num_seqs, fits))
    waves = math.ceil(share / batch)
    iterations = max(share - batch, 0) * response / batch + longest
    live = share * response / iterations if iterations > 0 else 0.0
    context = prompt + response / 2 if context is None else context
    rank_flops = hw.bf16_flops * ta.prefill_mfu
    read = hw.weights_bytes_per_rank + live * context * hw.kv_bytes_per_token
    per_iteration = max(read / (hw.bandwidth_bytes_per_s * ta.decode_bandwidth_efficiency),
                        2 * shape.parameters * live / hw.tensor_parallel / rank_flops)
    prefill = 2 * shape.parameters * prompt * share / hw.tensor_parallel / rank_flops
    decode = iterations * per_iteration
    return {"seconds": prefill + decode, "prefill_seconds": prefill, "decode_seconds": decode,
            "concurrent_sequences_per_replica": batch, "waves": waves, "decode_iterations": iterations,
            "longest_response_tokens": longest, "decode_iteration_seconds": per_iteration}


def verl_flops(shape: ModelShape, tokens: float, square_tokens: float) -> float:
    """Training FLOPs as verl 0.9.1 counts them for ``perf/mfu/actor`` (``_estimate_qwen2_flops``, which Qwen3
    uses): ``6 x dense x tokens + 6 x sum(s^2) x head_dim x heads x L``, ``dense = L (3 h I + h (q + 2 kv + q))
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


def step_and_experiment(shape: ModelShape, work: Workload, hw: Hardware, ta: TimeAssumptions) -> dict:
    """The estimate: a step's parts, ``step_seconds``, the evaluations, ``total_hours``, ``gpu_hours_per_arm``."""
    prompt = ta.mean_prompt_fraction * work.max_prompt_length
    lengths, eval_lengths = ta.train_lengths(work.max_response_length), ta.eval_lengths(work.max_response_length)
    response = lengths.mean
    sequences = work.prompts_per_step * work.n
    gen = generation(shape, sequences, prompt, response, hw, ta, longest=lengths.longest(sequences),
                     context=lengths.decode_context(prompt))
    train = verl_flops(shape, sequences * (prompt + response), sequences * lengths.mean_square_sequence(prompt)) / (
        hw.trainer_gpus * hw.bf16_flops * ta.train_mfu)
    offload = 0.0
    if work.offload_policy:  # per micro-batch: fp32 shards in for the forward and the backward, gradients out
        shard = shape.parameters / hw.trainer_gpus
        micro_batches = math.ceil(sequences * (prompt + response) / hw.trainer_gpus / work.tokens_per_micro_batch)
        offload = micro_batches * 12 * shard / ta.host_link_bytes_per_s + shard / ta.host_optimizer_params_per_s
    train += offload
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
    evaluation = generation(shape, eval_sequences, prompt, eval_lengths.mean, hw, ta,
                            longest=eval_lengths.longest(eval_sequences), context=eval_lengths.decode_context(prompt))
    evaluations = work.total_steps // work.test_freq + 1 if work.test_freq > 0 else 1
    total = work.total_steps * step + evaluations * evaluation["seconds"]
    gpus = hw.trainer_gpus if hw.shared_gpu else hw.trainer_gpus + hw.rollout_gpus
    return {"step_seconds": step, "bound_by": "rollout" if rollout_side >= trainer_side else "trainer",
            "generation": gen, "train_seconds": train, "offload_seconds": offload, "weight_sync_seconds": sync,
            "internode_collective_seconds": collectives,
            "sc_head_seconds": head, "mean_prompt_tokens": prompt, "mean_response_tokens": response,
            "longest_response_tokens": gen["longest_response_tokens"],
            "eval_mean_response_tokens": eval_lengths.mean,
            "eval_longest_response_tokens": evaluation["longest_response_tokens"],
            "evaluation_seconds": evaluation["seconds"], "evaluations": evaluations,
            "total_hours": total / 3600, "gpus": gpus, "gpu_hours_per_arm": total / 3600 * gpus}


#: The length assumptions of a plan's range: every response short (a quarter of the cap, none at it) and
#: every response at the cap, in training and in evaluation.
LENGTH_RANGE = ((0.25, 0.0), (1.0, 1.0))


def length_range(shape: ModelShape, work: Workload, hw: Hardware, ta: TimeAssumptions) -> dict[str, float]:
    """GPU-hours per arm and the step's seconds at the two ends of :data:`LENGTH_RANGE`."""
    out = {}
    for end, (mean, at_cap) in zip(("low", "high"), LENGTH_RANGE, strict=True):
        t = dataclasses.replace(ta, mean_response_fraction=mean, response_at_cap_fraction=at_cap,
                                eval_mean_response_fraction=mean, eval_response_at_cap_fraction=at_cap)
        est = step_and_experiment(shape, work, hw, t)
        out[f"{end}_step_seconds"] = est["step_seconds"]
        out[f"{end}_gpu_hours_per_arm"] = est["gpu_hours_per_arm"]
    return out
