"""The science: the arms (``ablations.arms``), their losses, the score-centering math, the reward, data preparation."""

import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)
