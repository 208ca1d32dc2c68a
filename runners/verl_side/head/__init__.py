"""The sampler's top-k head on released verl (0.9.1), carried by the project through verl's own slots.

The score-centering verl (:data:`runners.verl_side.revisions.releases.SCORE_CENTERING`) carries the head itself;
0.9.1 carries none, and its separate_async client drops every extra field of a rollout server. This
package carries it, for the SC arms only, without editing or copying verl's files (who carries an arm's head:
:func:`runners.verl_side.revisions.installed.head_carrier`):

==========  ===================================================================================
rollout     :mod:`~runners.verl_side.head.vllm_server` -- verl's vLLM server class (chosen by the
            replica, itself chosen by verl's ``RolloutReplicaRegistry``) asks vLLM for
            ``logprobs=k`` in its flat form (``flat_logprobs``), log-probs after temperature
            (verl's ``logprobs_mode=processed_logprobs``), on requests that carry
            :data:`REQUEST_KEY`; the CPU rollout of the rehearsal answers the same request
client      :mod:`~runners.verl_side.head.client` -- verl's ``FullyAsyncLLMServerClient`` with the head
            of every resumed segment concatenated (a partial rollout spans weight syncs)
agent loop  :mod:`~runners.verl_side.head.agent_loop` -- the agent-loop manager class chosen by config
            (``rollout.agent.agent_loop_manager_class``): its workers ask for the head on training
            rollouts only and store it beside the tokens, one row per sequence position
trainer     :mod:`~runners.verl_side.head.engine` -- verl's FSDP engine, registered in its
            ``EngineRegistry`` under the vendor :data:`ENGINE_VENDOR`: it opens verl's
            logits-processor slot, where the project's correction is computed from the trainer's
            logits (:mod:`~runners.verl_side.head.correction`), and hands it to the arm's loss
==========  ===================================================================================

The layout (:mod:`~runners.verl_side.head.head_layout`): per generated token, the k ids as int32 and their
log-probs as float32, ``8 k`` bytes (1,024 at k = 128; a 8,192-token response carries 8.4 MB).
"""

#: Where a rollout request asks for the head: ``sampling_params["extra_args"][REQUEST_KEY] = k``
#: (vLLM's ``SamplingParams.extra_args`` is for plug-ins; verl passes it through).
REQUEST_KEY = "sc_ablations_topk"
#: A rollout server's ``TokenOutput.extra_fields`` with the head of the generated tokens, one row per
#: token (the names the score-centering verl's vLLM server uses).
TOKEN_IDS, TOKEN_LOG_PROBS = "response_topk_ids", "response_topk_log_probs"
#: The training batch's fields: one head per sequence position (response token r at row
#: ``prompt_length - 1 + r``, a dummy head elsewhere), the layout the score-centering verl's trainer reads.
SEQUENCE_IDS, SEQUENCE_LOG_PROBS = "rollout_topk_ids", "rollout_topk_log_probs"
#: verl's ``EngineRegistry`` vendor key of the head-reading FSDP engine (``VERL_ENGINE_VENDOR``).
ENGINE_VENDOR = "sc_ablations_head"
#: Where the launcher writes k in verl's config (``RolloutConfig.custom``, verl's extension point).
CUSTOM_KEY = "sc_ablations_topk"
#: The module every verl process of an SC arm imports (``VERL_USE_EXTERNAL_MODULES``).
PLUGIN_MODULE = f"{__name__}.plugin"
#: The agent-loop manager class of an SC arm (``rollout.agent.agent_loop_manager_class``).
MANAGER_CLASS = f"{__name__}.agent_loop.HeadAgentLoopManager"


#: verl's platform name (``VERL_PLATFORM``) of the project's CPU platform (:mod:`runners.verl_side.platform.rehearsal`): its rollout
#: answers the head request itself, so there :mod:`~runners.verl_side.head.plugin` leaves verl's rollout name ``vllm``
#: to it.
CPU_PLATFORM = "cpu"


def cpu_platform_selected() -> bool:
    """Is the project's CPU platform selected in this process (``VERL_PLATFORM=cpu``)?"""
    import os

    return os.environ.get("VERL_PLATFORM", "").strip().lower() == CPU_PLATFORM
