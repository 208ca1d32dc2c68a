"""The README's figure: the evaluation curves of the main job's report, regenerated from its results.

    python benchmarks/report/readme_figure.py [RESULTS_DIR]          # default results/embedded_default

Runs the report (``python -m analysis RESULTS_DIR``, which writes ``RESULTS_DIR/report/eval_curves.png``),
trims the figure's white margins (and scales it down to ``--max-width`` pixels if wider), writes it to
``docs/images/embedded_default_eval_curves.png`` and rewrites the note under the figure in ``README.md``
(between the ``readme-figure`` markers): the command, the date, and the runs it was made from (their code
version, library versions and when they ended).

It refuses a folder that is not the main job's results (``python runners/launch.py -m
method=pg,tis,sc,sc_tis seed=42``): exactly the four runs ``pg``, ``tis``, ``sc``, ``sc_tis`` at seed 42,
finished, written by the embedded backend (``run.backend`` in ``metrics.json``: ``embedded``, or ``local``, its
name in records written before it was called embedded).
``--any-sweep --out FILE`` makes the same figure from any sweep (a synthetic one, to check this script)
and leaves the README and the committed figure alone.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_RESULTS = Path("results/embedded_default")
FIGURE = REPO / "docs" / "images" / "embedded_default_eval_curves.png"
README = REPO / "README.md"
START, END = "<!-- readme-figure:start -->", "<!-- readme-figure:end -->"
MAIN_RUNS = {f"{m}-seed42" for m in ("pg", "tis", "sc", "sc_tis")}
WHITE_THRESHOLD = 250  # a pixel whose every channel is at least this is margin
PAD = 12  # pixels of margin kept around the trimmed figure


def read_records(results: Path) -> dict[str, dict]:
    """``run`` section of every ``<run>/metrics.json`` directly under ``results``, by folder name."""
    records = {}
    for path in sorted(results.glob("*/metrics.json")):
        try:
            records[path.parent.name] = json.loads(path.read_text())["run"]
        except (OSError, ValueError, KeyError) as e:
            records[path.parent.name] = {"unreadable": str(e)}
    return records


#: ``run.backend`` of an embedded run: today's name and the old one (runners.config.config_history.RENAMED_VALUES).
EMBEDDED_NAMES = ("embedded", "local")


def main_job_problems(records: dict[str, dict]) -> list[str]:
    """Why these records are not the main job's finished results (empty when they are)."""
    problems = []
    if set(records) != MAIN_RUNS:
        problems.append(f"run folders {sorted(records)}, expected exactly {sorted(MAIN_RUNS)}")
    for name, run in sorted(records.items()):
        if "unreadable" in run:
            problems.append(f"{name}: metrics.json unreadable ({run['unreadable']})")
            continue
        if run.get("backend") not in EMBEDDED_NAMES:
            problems.append(f"{name}: backend {run.get('backend')!r}, not the embedded backend ('embedded')")
        if run.get("status") != "finished":
            problems.append(f"{name}: status {run.get('status')!r}, not 'finished'")
    return problems


def provenance(records: dict[str, dict]) -> str:
    """One sentence on the runs: code version(s), library versions, steps, when the last one ended."""
    def distinct(values):
        return ", ".join(sorted({str(v) for v in values if v is not None})) or "unknown"

    runs = [r for r in records.values() if "unreadable" not in r]
    versions = [r.get("versions", {}) for r in runs]
    ended = [a.get("ended") for r in runs for a in r.get("attempts", []) if a.get("ended")]
    last = max(ended)[:10] if ended else "unknown"
    return (f"code {distinct(v.get('project') for v in versions)}, "
            f"torch {distinct(v.get('torch') for v in versions)}, verl {distinct(v.get('verl') for v in versions)}; "
            f"{distinct(r.get('last_step') for r in runs)} steps; last run ended {last}")


def run_report(results: Path) -> Path:
    """``python -m analysis RESULTS`` in a child process (the report exactly as a user gets it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "analysis", str(results)]
    print("$ python -m analysis", results, file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, env=env)
    figure = results / "report" / "eval_curves.png"
    if not figure.is_file():
        raise SystemExit(f"readme_figure: the report wrote no {figure}")
    return figure


def trim(source: Path, out: Path, max_width: int) -> tuple[int, int]:
    """Copy ``source`` to ``out`` without its white margins (``PAD`` pixels kept), at most ``max_width`` wide."""
    from PIL import Image

    image = Image.open(source).convert("RGB")
    # the bounding box of the pixels that are not (nearly) white
    mask = image.point(lambda v: 255 if v < WHITE_THRESHOLD else 0).convert("L")
    box = mask.getbbox()
    if box is not None:
        left, top, right, bottom = box
        box = (max(left - PAD, 0), max(top - PAD, 0), min(right + PAD, image.width), min(bottom + PAD, image.height))
        image = image.crop(box)
    if image.width > max_width:
        image = image.resize((max_width, round(image.height * max_width / image.width)), Image.LANCZOS)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, optimize=True)
    return image.size


def write_note(readme: Path, note: str) -> None:
    text = readme.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"readme_figure: {readme} lacks the markers {START} and {END}")
    readme.write_text(re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: f"{START}\n{note}\n{END}", text,
                             flags=re.S))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=DEFAULT_RESULTS,
                        help=f"the main job's results folder (default {DEFAULT_RESULTS})")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"where the figure goes (default {FIGURE.relative_to(REPO)})")
    parser.add_argument("--readme", type=Path, default=README, help="the README whose note is rewritten")
    parser.add_argument("--max-width", type=int, default=1600, help="scale the figure down to this width (px)")
    parser.add_argument("--any-sweep", action="store_true",
                        help="accept any sweep (needs --out elsewhere than the committed figure; the README is left alone)")
    args = parser.parse_args(argv)

    results = args.results
    if not results.is_dir():
        raise SystemExit(f"readme_figure: no folder {results}: run the main job first "
                         "(python runners/launch.py -m method=pg,tis,sc,sc_tis seed=42)")
    records = read_records(results)
    problems = main_job_problems(records)
    if args.any_sweep:
        if args.out is None or args.out.resolve() == FIGURE.resolve():
            raise SystemExit("readme_figure: --any-sweep needs --out FILE elsewhere than "
                             f"{FIGURE.relative_to(REPO)}: that file is the main job's figure")
    elif problems:
        print(f"readme_figure: {results} is not the main job's finished results:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        print("  (--any-sweep --out FILE makes the figure from it anyway, leaving the README alone)", file=sys.stderr)
        return 2

    out = args.out if args.out is not None else FIGURE
    size = trim(run_report(results), out, args.max_width)
    print(f"wrote {out} ({size[0]} x {size[1]} px)")
    if args.any_sweep:
        return 0
    today = dt.datetime.now(dt.UTC).date().isoformat()
    shown = results.as_posix()
    if results.is_absolute() and results.resolve().is_relative_to(REPO):
        shown = results.resolve().relative_to(REPO).as_posix()
    note = (f"*Made by `python benchmarks/report/readme_figure.py {shown}` on {today} from the main job's "
            f"four runs ({provenance(records)}): `{shown}/report/eval_curves.png`, margins trimmed.*")
    write_note(args.readme, note)
    print(f"wrote the note under the figure into {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
