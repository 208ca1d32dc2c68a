"""``python -m ablations.data ARGS``: says on stderr that the command is now ``python -m math_data`` (``sca-data``)
and runs that with the same arguments, in place of this process (its exit status is the new command's)."""

from __future__ import annotations

import os
import sys

NEW_COMMAND = "math_data"

if __name__ == "__main__":
    print(f"python -m ablations.data is now python -m {NEW_COMMAND} (or sca-data); running that", file=sys.stderr)
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", NEW_COMMAND, *sys.argv[1:]])
