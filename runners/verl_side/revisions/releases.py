"""The verl revisions the harness supports: the PyPI release 0.9.1 and commit 8718ca30 (PR #8010, verl's own
score-centering transport), with the command that installs each (docs/verl_reference.md).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Revision:
    name: str
    commit: str | None  # None: the PyPI release
    install: str  # how a GPU user gets it (see docs/verl_reference.md)
    score_centering: bool


_SC_COMMIT = "8718ca30a3f002f93b7c4fd99b9b2506718681bc"
PYPI = Revision("0.9.1", None, 'pip install -e ".[gpu]"', score_centering=True)
#: Optional: verl as head carrier. The project's gpu extra first, then verl from git at the commit over the wheel.
SCORE_CENTERING = Revision(_SC_COMMIT[:8], _SC_COMMIT, f'{PYPI.install} && pip install --no-deps '
                           f'"verl @ git+https://github.com/verl-project/verl.git@{_SC_COMMIT}"', score_centering=True)
REQUIRED_COMMIT = SCORE_CENTERING.commit  # the first with verl's own score-centering transport (the reference runs)
REQUIRED_COMMIT_SHORT = SCORE_CENTERING.name
INSTALL_COMMAND = SCORE_CENTERING.install
