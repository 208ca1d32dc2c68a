"""``python -m runners.verl_side.checkpoints``: :func:`runners.verl_side.checkpoints.store.main`."""

from runners.verl_side.checkpoints.store import main

raise SystemExit(main())
