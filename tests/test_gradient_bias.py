"""The Monte Carlo estimator of benchmarks/arms/gradient_bias.py recovers a known bias through the noise."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "arms" / "gradient_bias.py"
_spec = importlib.util.spec_from_file_location("gradient_bias", _PATH)
gradient_bias = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gradient_bias)


def _batches(rng, mean, bias, count, noise, coupled_noise):
    """Paired per-batch gradients: shared noise (common random numbers) plus each side's own."""
    shared = rng.normal(0, noise, (count, mean.size))
    on = mean + shared + rng.normal(0, coupled_noise, (count, mean.size))
    off = mean + bias + shared + rng.normal(0, coupled_noise, (count, mean.size))
    return on, off


@pytest.mark.parametrize("true_relative", [0.0, 0.3, 1.0])
def test_debiased_relative_bias_and_cosine_are_recovered(true_relative):
    rng = np.random.default_rng(0)
    dim = 2000
    mean = rng.normal(0, 1, dim)
    direction = rng.normal(0, 1, dim)
    direction -= direction @ mean / (mean @ mean) * mean  # orthogonal to the mean gradient
    bias = true_relative * np.linalg.norm(mean) * direction / np.linalg.norm(direction)
    # per-batch noise 3x the signal per coordinate: a plain ||mean_on - mean_off|| would be dominated by it
    on, off = _batches(rng, mean, bias, count=60, noise=3.0, coupled_noise=1.0)
    out = gradient_bias.bias_summary(on, off, np.random.default_rng(1), boot=200)
    assert out["relative_bias"] == pytest.approx(true_relative, abs=0.08)
    assert out["cosine"] == pytest.approx(1 / np.sqrt(1 + true_relative**2), abs=0.06)
    lo, hi = out["relative_bias_90"]
    assert lo - 0.02 <= true_relative <= hi + 0.02
    naive = np.linalg.norm(off.mean(0) - on.mean(0)) / np.linalg.norm(on.mean(0))
    if true_relative == 0.0:
        assert naive > 0.15  # the undebiased estimate sees bias where there is none


def test_too_few_batches_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        gradient_bias.main(["--batches", "2"])
    assert stop.value.code == 2  # argparse's usage error, before any model is loaded
    assert "error: --batches must be >= 3" in capsys.readouterr().err
