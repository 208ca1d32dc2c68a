"""``python3 -m benchmarks.device_check [--cpu-small] [--out DIR] ...``: :func:`.check.main`."""

import sys

from .check import main

sys.exit(main())
