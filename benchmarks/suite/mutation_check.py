"""Mutation check: deliberate breaks of the code, each of which some test must catch (not part of CI).

Each mutation is one textual replacement in one file, applied to a fresh copy of the repository in a
temporary folder (never to the checkout itself); the named test files then run there, with
``PYTHONPATH`` pointing at the copy. A mutation is *caught* when pytest reports failed tests (exit 1) or
a test module that no longer imports (exit 2, an error during collection).
First, unless ``--no-baseline``, each test selection runs once on an unmutated copy and must pass: a
selection that already fails would catch every mutation.

    python benchmarks/suite/mutation_check.py            # every mutation
    python benchmarks/suite/mutation_check.py --list     # what each one breaks
    python benchmarks/suite/mutation_check.py pairing_seed_order logger_flush_module
    python benchmarks/suite/mutation_check.py --tests-at b57ea45 sc_sampled_token_detached   # the older tests

Prints, per mutation, the replacement, the tests run and ``caught`` / ``NOT caught``; the exit status
is 1 if any mutation was not caught (2 if one no longer applies or a baseline fails).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    what: str  # the break, in words
    path: str
    old: str  # must occur exactly once in ``path``
    new: str
    tests: tuple[str, ...]  # pytest arguments: files, node ids, -k expressions


MUTATIONS: tuple[Mutation, ...] = (
    # -- the arms' math
    Mutation("sc_rho_inverted", "score centering's rho = trainer tail / sampler tail (inverted)",
             "ablations/score_centering.py",
             "rho = (sampler_tail.clamp_min(eps) / train_tail.clamp_min(eps))",
             "rho = (train_tail.clamp_min(eps) / sampler_tail.clamp_min(eps))",
             ("tests/test_score_centering.py",)),
    Mutation("sc_sampled_token_detached", "SC arms lose the sampled token's gradient (log p(a) detached)",
             "ablations/token_loss.py", "score = score - correction", "score = score.detach() - correction",
             ("tests/test_losses.py",)),
    Mutation("sc_tis_without_cap", "SC+TIS trains without the TIS weight (cap not passed)",
             "ablations/losses.py",
             "return _reinforce(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, cap, correction)",
             "return _reinforce(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, None, correction)",
             ("tests/test_losses.py",)),
    Mutation("sc_icepop_band_ignored", "the centering term's IcePop head weight keeps every head token (no band)",
             "ablations/score_centering.py",
             "coef = torch.where((ratio >= lower) & (ratio <= upper), p, torch.zeros_like(p))", "coef = p.clone()",
             ("tests/test_arms.py",)),
    Mutation("sc_corrected_without_weight", "SC with verl's correction trains without verl's sampled-token weight",
             "ablations/losses.py",
             'weights = None if weights_proto is None else weights_proto.batch["rollout_is_weights"]', "weights = None",
             ("tests/test_arms.py",)),
    # -- the pairing (caught by the seed-order test of analysis/synthetic.py)
    Mutation("pairing_seed_order", "a paired comparison ignores the seed order of the runs",
             "analysis/pairing.py",
             "diff_paired_two_level(ya[list(design.order_a)], yb[list(design.order_b)], slices)",
             "diff_paired_two_level(ya, yb, slices)",
             ("tests/test_analysis_pairing.py", "tests/test_analysis_cross.py", "tests/test_analysis_seeds.py",
              "tests/test_analysis_report.py")),
    # -- the statistics
    Mutation("arm_mean_problem_df", "an arm's two-level mean gives its problem part n df instead of n - 1",
             "analysis/seeds.py", "df_prob = ys.shape[-1] - 1", "df_prob = ys.shape[-1]",
             ("tests/test_analysis_seeds.py",)),
    Mutation("sets_share_a_resample_stream", "every set is resampled with stream 0 (the avg interval's sets "
             "no longer independent)", "analysis/stats.py", "b = resampler.means(x[..., sl], stream=s)",
             "b = resampler.means(x[..., sl], stream=0)", ("tests/test_analysis_stats.py",)),
    # -- the run contract
    Mutation("pairing_without_data_order", "runs whose seed does not fix the data order count as seed pairs",
             "runners/run/run_contract.py", "if PAIRING_STREAM not in a.get(\"streams\", []):",
             "if False:", ("tests/test_contract.py",)),
    Mutation("sc_metrics_not_required", "the contract no longer asks SC arms for their metrics",
             "runners/run/contract_check.py", "if arm.sc:\n        names += SC_TRAIN_METRICS",
             "if False:\n        names += SC_TRAIN_METRICS",
             ("tests/test_contract.py::test_required_metrics_per_arm",)),
    # -- resume
    Mutation("resume_from_oldest", "a resume loads the oldest kept checkpoint", "runners/embedded/checkpoint.py",
             "step, path = found[-1]", "step, path = found[0]",
             ("tests/test_embedded_backend.py", "-k", "checkpoint")),
    Mutation("extend_allows_shortening", "a run folder may be relaunched with fewer total steps",
             "runners/run/run_folder.py", "and after > before:", "and after != before:",
             ("tests/test_run_folder_safety.py::test_extending_a_run_equals_the_longer_run_bit_for_bit",)),
    # -- the verl revision facts
    Mutation("logger_flush_module", "LOGGER_FLUSH reads a misspelt module: the fix of verl 0.9.1's init crash "
             "is no longer applied", "runners/verl_side/revisions/defects.py",
             '"verl.trainer.ppo.v1.trainer_separate_async",', '"verl.trainer.ppo.v1.trainer_separate_asynk",',
             ("tests/test_rehearsal.py", "-k", "logger_flush or survives")),
    Mutation("is_threshold_default", "the recorded default TIS cap is not verl's", "runners/verl_side/revisions/config_facts.py",
             "DEFAULT_IS_THRESHOLD = 2.0", "DEFAULT_IS_THRESHOLD = 2.5",
             ("tests/test_verl_dry_run.py::test_default_threshold_is_verls",)),
    Mutation("rehearsal_swap_keys_unnamed", "a swap no longer names the Ray runtime_env keys it sets: the rehearsal's "
             "difference from the reference puts them down to conf/experiment/rehearsal.yaml",
             "runners/verl_side/platform/rehearsal/swaps.py",
             'return [*self.overrides, *(f"env:{k}" for k in env), *(f"{RUNTIME_ENV}.{k}" for k in env)]',
             'return [*self.overrides, *(f"env:{k}" for k in env)]',
             ("tests/test_rehearsal.py::test_difference_from_the_reference_is_the_named_swaps_and_the_sizes",)),
    # -- the capacity plan
    Mutation("capacity_entropy_not_kept", "the capacity plan forgets the entropy's fp32 chunks kept for its backward",
             "runners/capacity/trainer_memory.py",
             "kept = 2 * FP32 * tv if s.calculate_entropy and not s.entropy_checkpointing else 0",
             "kept = 0",
             ("tests/test_capacity.py",)),
    Mutation("capacity_count_import_broken", "benchmarks/capacity/count.py imports a module of the repository that "
             "is not there (moved): its tests must fail, not skip", "benchmarks/capacity/count.py",
             "from runners.config.model_shapes import PUBLISHED as SHAPES", "from runners.config.model_shape import PUBLISHED as SHAPES",
             ("tests/test_capacity_count.py",)),
    Mutation("capacity_refusal_ignored", "a launch whose capacity plan does not fit is not refused",
             "runners/capacity/plan.py",
             "    if reason is not None and enforce:\n        raise ConfigError(reason)",
             "    if reason is not None and enforce and False:\n        raise ConfigError(reason)",
             ("tests/test_capacity.py",)),
)


def copy_repo(dest: Path, tests_at: str | None = None) -> Path:
    """The checkout's tracked and untracked-but-not-ignored files, copied to ``dest``; with ``tests_at``
    (a git revision) its ``tests/`` replaced by that revision's."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    if tests_at is not None:
        shutil.rmtree(dest / "tests")
        archive = subprocess.run(["git", "archive", tests_at, "tests"], cwd=REPO, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def run_tests(root: Path, tests: tuple[str, ...], timeout: int) -> tuple[int, str, float]:
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    # one process (-n0): under pyproject's -n auto a module that fails to import ends without pytest's "during
    # collection" line, so a broken import would read as NOT caught
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-n0", "-p", "no:warnings", *tests]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "timed out", time.monotonic() - start
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    summary = lines[-1] if lines else proc.stderr[-300:]
    if proc.returncode == 2 and "during collection" in proc.stdout:
        summary += " (a test module failed to import: error during collection)"
    return proc.returncode, summary, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of each test selection")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per pytest run")
    parser.add_argument("--tests-at", metavar="REV", help="run the tests/ of this git revision (e.g. the tests "
                        "before a change) against the checkout's code")
    args = parser.parse_args(argv)
    by_name = {m.name: m for m in MUTATIONS}
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name}: {m.what} ({m.path}; tests: {' '.join(m.tests)})")
        return 0
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        parser.error(f"unknown mutation(s) {unknown}; known: {', '.join(by_name)}")
    chosen = [by_name[n] for n in args.names] if args.names else list(MUTATIONS)

    status = 0
    with tempfile.TemporaryDirectory(prefix="mutation_check_") as tmp:
        if not args.no_baseline:
            base = copy_repo(Path(tmp) / "baseline", args.tests_at)
            for tests in dict.fromkeys(m.tests for m in chosen):
                rc, summary, secs = run_tests(base, tests, args.timeout)
                print(f"baseline  {' '.join(tests)}: {summary} ({secs:.0f} s)", flush=True)
                if rc != 0:
                    print("  the unmutated code fails this selection: its mutations cannot be judged", flush=True)
                    status = 2
            shutil.rmtree(base)
        for m in chosen:
            root = copy_repo(Path(tmp) / m.name, args.tests_at)
            target = root / m.path
            text = target.read_text(encoding="utf-8")
            print(f"\n{m.name}: {m.what}\n  {m.path}: {m.old!r}\n    -> {m.new!r}\n  tests: {' '.join(m.tests)}",
                  flush=True)
            if text.count(m.old) != 1:
                print(f"  does not apply: the text occurs {text.count(m.old)} times (must be once)", flush=True)
                status = max(status, 2)
                continue
            target.write_text(text.replace(m.old, m.new), encoding="utf-8")
            rc, summary, secs = run_tests(root, m.tests, args.timeout)
            caught = rc == 1 or (rc == 2 and "during collection" in summary)  # failed, or a module that breaks
            print(f"  {'caught' if caught else 'NOT caught'}: {summary} (exit {rc}, {secs:.0f} s)", flush=True)
            if not caught:
                status = max(status, 1)
            shutil.rmtree(root)
    return status


if __name__ == "__main__":
    sys.exit(main())
