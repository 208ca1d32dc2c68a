"""``python -m runners.verl.checkpoints``: :func:`runners.verl.checkpoints.store.main`."""

from runners.verl.checkpoints.store import main

raise SystemExit(main())
