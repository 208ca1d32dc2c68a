"""CI's skip check: the tests pytest skipped, by id and reason, against the expected list.

    python .ci/skips.py JUNIT_XML EXPECTED_FILE

``JUNIT_XML`` is pytest's ``--junitxml`` report; ``EXPECTED_FILE`` holds one expected skip a line,
``<test id> | <reason>`` (the test id as pytest names it, ``tests/test_x.py::test_y[param]``; the
reason a part of pytest's skip message), blank lines and ``#`` comments ignored. Exit status 0 when
the skipped tests are exactly the listed ones, each for its listed reason; otherwise 1, with one line
per difference: a skip not in the list (it may hide a failure: a broken install, a detector that finds
nothing), a listed test that ran (its skip is gone: take it off the list), or a listed test skipped
for another reason. An xfail counts as a skip (pytest reports it so in the XML).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_id(classname: str, name: str, root: Path | None = None) -> str:
    """pytest's node id of a JUnit test case: ``tests.test_x.TestY`` + ``test_z`` ->
    ``tests/test_x.py::TestY::test_z`` (the module is the longest prefix that is a file under ``root``);
    a module skipped whole has an empty class name and its dotted path as name: ``tests/test_x.py``."""
    root = REPO if root is None else root
    if not classname:  # a module skipped whole at collection (e.g. pytest.importorskip at its top)
        module = Path(*name.split(".")).with_suffix(".py")
        return module.as_posix() if (root / module).is_file() else name
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = Path(*parts[:cut]).with_suffix(".py")
        if (root / module).is_file():
            return "::".join([module.as_posix(), *parts[cut:], name])
    return "::".join([*parts, name])


def skipped(junit: Path, root: Path | None = None) -> dict[str, str]:
    """Test id -> skip message, for every skipped (or xfailed) test case of the report."""
    out = {}
    for case in ET.parse(junit).iter("testcase"):
        skip = case.find("skipped")
        if skip is not None:
            message = skip.get("message", "")
            if message == "collection skipped":  # the reason is in the text: "(path, line, 'Skipped: reason')"
                reason = (skip.text or "").strip().partition("Skipped: ")[2]
                message = reason[:-2] if reason[-2:] in ("')", '")') else reason or message
            out[test_id(case.get("classname", ""), case.get("name", ""), root)] = message
    return out


def expected(text: str) -> dict[str, str]:
    """Test id -> reason, from ``<test id> | <reason>`` lines."""
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        node, sep, reason = line.partition("|")
        if not sep or not node.strip() or not reason.strip():
            raise ValueError(f"expected skips, line {number}: not '<test id> | <reason>': {line!r}")
        out[node.strip()] = reason.strip()
    return out


def differences(got: dict[str, str], want: dict[str, str]) -> list[str]:
    """One line per skip that is not as listed; empty when the skips are exactly the list."""
    lines = [f"skipped but not in the expected list: {node} ({got[node]})" for node in got if node not in want]
    lines += [f"listed as skipped but not skipped (ran, or no longer collected): {node}"
              for node in want if node not in got]
    lines += [f"skipped for another reason than listed: {node}: {got[node]!r}, listed {want[node]!r}"
              for node in want if node in got and want[node] not in got[node]]
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    got, want = skipped(Path(argv[0])), expected(Path(argv[1]).read_text())
    problems = differences(got, want)
    for line in problems:
        print(f"CI: {line}", file=sys.stderr)
    if problems:
        print("CI: the expected skips are listed at the top of .ci/run", file=sys.stderr)
        return 1
    print(f"CI: {len(got)} tests skipped, each as listed in .ci/run")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
