"""``python -m math_data``: build the verl parquet files and the overlap report.

Examples (the defaults are the reference experiment's sources)::

    python -m math_data all --out-dir data/ --tokenizer Qwen/Qwen3-4B --expect-rows 17398 --expect-kept 17390
        # -> data/dapo_math_17k/train.parquet, data/aime2024/test.parquet, data/aime2025/test.parquet,
        #    data/overlap.json, data/prep_report.json (+ a <file>.report.json beside each parquet)
    python -m math_data train --out data/dapo_math_17k/train.parquet --tokenizer Qwen/Qwen3-4B
    python -m math_data eval --name aime2024 --out data/aime2024/test.parquet --tokenizer Qwen/Qwen3-4B
    python -m math_data overlap --train data/dapo_math_17k/train.parquet \\
        --eval data/aime2024/test.parquet data/aime2025/test.parquet --out data/overlap.json

Any ``--source``/``--train-source``/``--<set>-source`` may be a local file or folder of the same
schema instead of a hub id. Each parquet gets a ``<name>.report.json`` beside it (counts: read,
kept, dropped over length, skipped malformed); ``all`` also writes ``prep_report.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from math_data.aime import EVAL_SETS, prepare_eval
from math_data.dapo import prepare_train
from math_data.overlap import DEFAULT_NGRAM, overlap_report
from math_data.prompting import load_tokenizer
from math_data.sources import DataPrepError, describe_source, load_rows, write_parquet

TRAIN_SOURCE = {
    "source": "open-r1/DAPO-Math-17k-Processed",
    "config": "all",
    "split": "train",
    "revision": "31dd309567e3da778038cc87d868b6097a3ccf68",
}
DEFAULT_TOKENIZER = "Qwen/Qwen3-4B"
#: File names below ``--out-dir`` (what conf/experiment/qwen3_4b_sc_repro.yaml points verl at).
TRAIN_FILE = "dapo_math_17k/train.parquet"
EVAL_FILE = "{name}/test.parquet"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def report_path(parquet: Path) -> Path:
    return parquet.with_name(parquet.stem + ".report.json")


def build_train(
    source: dict[str, Any],
    tokenizer: Any,
    tokenizer_name: str,
    max_len: int,
    out: Path,
    expect: tuple[int | None, int | None] = (None, None),
) -> dict:
    """Prepare and write the train parquet; ``expect`` = (rows read, rows kept) to insist on."""
    rows = load_rows(
        source["source"], config=source["config"], split=source["split"], revision=source["revision"]
    )
    prepared, report = prepare_train(rows, tokenizer, max_prompt_length=max_len)
    for what, want, got in (
        ("rows read", expect[0], report["rows_read"]),
        ("rows kept", expect[1], report["kept"]),
    ):
        if want is not None and want != got:
            raise DataPrepError(
                f"train: {got} {what}, expected {want} (read {report['rows_read']}, kept {report['kept']}, "
                f"{report['dropped_over_length']} over {max_len} tokens, {report['skipped_malformed']} malformed)"
            )
    report = _write_outputs(prepared, out, source, tokenizer_name, report)
    print(
        f"train: {report['rows_read']} rows -> {report['kept']} kept "
        f"({report['dropped_over_length']} over {max_len} tokens, {report['skipped_malformed']} malformed) -> {out}"
    )
    return report


def build_eval(
    name: str,
    source: dict[str, Any],
    tokenizer: Any,
    tokenizer_name: str,
    max_len: int,
    expected: int | None,
    out: Path,
) -> dict:
    rows = load_rows(
        source["source"], config=source["config"], split=source["split"], revision=source["revision"]
    )
    prepared, report = prepare_eval(rows, name, tokenizer, max_prompt_length=max_len, expected_count=expected)
    report = _write_outputs(prepared, out, source, tokenizer_name, report)
    print(f"{name}: {report['kept']} problems -> {out}")
    return report


def _write_outputs(prepared: Any, out: Path, source: dict[str, Any], tokenizer_name: str, report: dict) -> dict:
    """Write the parquet and its ``.report.json`` (output, source, tokenizer, counts); return the report."""
    write_parquet(prepared, out)
    report = {"output": str(out), "source": describe_source(**_src_kwargs(source)), "tokenizer": tokenizer_name,
              **report}
    _write_json(report_path(out), report)
    return report


def _src_kwargs(source: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": source["source"],
        "config": source["config"],
        "split": source["split"],
        "revision": source["revision"],
    }


def _problems(parquet: Path) -> tuple[str, list[tuple[str, str]]]:
    rows = load_rows(parquet)
    if not rows:
        raise DataPrepError(f"{parquet}: no rows")
    try:
        items = [(r["extra_info"]["problem_id"], r["extra_info"]["problem"]) for r in rows]
    except (KeyError, TypeError) as err:
        raise DataPrepError(
            f"{parquet}: not written by math_data (extra_info.problem_id/problem missing)"
        ) from err
    return rows[0]["data_source"], items


def build_overlap(train: Path, evals: list[Path], n: int, out: Path) -> dict:
    _, train_items = _problems(train)
    eval_items = dict(_problems(p) for p in evals)
    report = {
        "train_file": str(train),
        "eval_files": [str(p) for p in evals],
        **overlap_report(train_items, eval_items, n=n),
    }
    _write_json(out, report)
    for name, s in report["sets"].items():
        print(
            f"overlap {name}: {s['exact_match']['count']} exact, {s['ngram_overlap']['count']} {n}-gram "
            f"of {s['n_problems']} -> {out}"
        )
    return report


def _add_source_args(p: argparse.ArgumentParser, prefix: str, default: dict[str, Any]) -> None:
    p.add_argument(f"--{prefix}source", default=default["source"], help="hub id or local file/folder")
    p.add_argument(f"--{prefix}config", default=default["config"])
    p.add_argument(f"--{prefix}split", default=default["split"])
    p.add_argument(f"--{prefix}revision", default=default["revision"], help="hub revision (commit) to pin")


def _source_from(args: argparse.Namespace, prefix: str) -> dict[str, Any]:
    key = prefix.replace("-", "_")
    return {k: getattr(args, f"{key}{k}") for k in ("source", "config", "split", "revision")}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m math_data", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)

    def expect(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--expect-rows", type=int, default=None, help="fail unless the train source has this many rows"
        )
        p.add_argument(
            "--expect-kept", type=int, default=None, help="fail unless this many train rows are kept"
        )

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--tokenizer", default=DEFAULT_TOKENIZER, help="the policy's tokenizer (hub id or folder)"
        )
        p.add_argument("--max-prompt-length", type=int, default=1024)

    p = sub.add_parser("train", help="DAPO-Math-17k -> verl train parquet")
    _add_source_args(p, "", TRAIN_SOURCE)
    common(p)
    expect(p)
    p.add_argument("--out", type=Path, default=Path("data") / TRAIN_FILE)

    p = sub.add_parser("eval", help="one AIME set -> verl eval parquet")
    p.add_argument("--name", required=True, help="data_source, e.g. aime2024 or aime2025")
    p.add_argument("--source", default=None)
    p.add_argument("--config", default=None)
    p.add_argument("--split", default=None)
    p.add_argument("--revision", default=None)
    p.add_argument("--expected-count", type=int, default=30, help="rows the set must have (0: any)")
    common(p)
    p.add_argument("--out", type=Path, default=None)

    p = sub.add_parser("overlap", help="train/eval overlap report from prepared parquet files")
    p.add_argument("--train", type=Path, required=True)
    p.add_argument("--eval", type=Path, nargs="+", required=True)
    p.add_argument("--ngram", type=int, default=DEFAULT_NGRAM)
    p.add_argument("--out", type=Path, default=Path("data/overlap.json"))

    p = sub.add_parser("all", help="train + AIME 2024 + AIME 2025 + overlap")
    _add_source_args(p, "train-", TRAIN_SOURCE)
    for name, default in EVAL_SETS.items():
        _add_source_args(p, f"{name}-", default)
    p.add_argument("--expected-count", type=int, default=30)
    p.add_argument("--ngram", type=int, default=DEFAULT_NGRAM)
    common(p)
    expect(p)
    p.add_argument("--out-dir", type=Path, default=Path("data"))
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "overlap":
            build_overlap(args.train, args.eval, args.ngram, args.out)
            return 0
        tokenizer = load_tokenizer(args.tokenizer)
        if args.command == "train":
            build_train(
                _source_from(args, ""),
                tokenizer,
                args.tokenizer,
                args.max_prompt_length,
                args.out,
                (args.expect_rows, args.expect_kept),
            )
        elif args.command == "eval":
            default = EVAL_SETS.get(
                args.name, {"source": None, "config": None, "split": "train", "revision": None}
            )
            source = {
                k: getattr(args, k) if getattr(args, k) is not None else default[k]
                for k in ("source", "config", "split", "revision")
            }
            if source["source"] is None:
                raise DataPrepError(f"--source is required for an eval set other than {', '.join(EVAL_SETS)}")
            out = args.out or Path("data") / EVAL_FILE.format(name=args.name)
            build_eval(
                args.name,
                source,
                tokenizer,
                args.tokenizer,
                args.max_prompt_length,
                args.expected_count or None,
                out,
            )
        else:
            out_dir: Path = args.out_dir
            train_out = out_dir / TRAIN_FILE
            summary = {
                "train": build_train(
                    _source_from(args, "train-"),
                    tokenizer,
                    args.tokenizer,
                    args.max_prompt_length,
                    train_out,
                    (args.expect_rows, args.expect_kept),
                )
            }
            eval_outs = []
            for name in EVAL_SETS:
                eval_outs.append(out_dir / EVAL_FILE.format(name=name))
                summary[name] = build_eval(
                    name,
                    _source_from(args, f"{name}-"),
                    tokenizer,
                    args.tokenizer,
                    args.max_prompt_length,
                    args.expected_count or None,
                    eval_outs[-1],
                )
            summary["overlap"] = build_overlap(train_out, eval_outs, args.ngram, out_dir / "overlap.json")
            _write_json(out_dir / "prep_report.json", summary)
    except DataPrepError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
