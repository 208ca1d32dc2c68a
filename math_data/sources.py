"""Reading rows from a hub dataset or a local file/folder of the same schema; writing parquet.

A *source* is either an existing local path (a ``.parquet``/``.jsonl``/``.json`` file, or a
folder of them, searched recursively in sorted order; when ``config`` names a sub-folder that
exists, only that sub-folder is read) or a hub id ``owner/name`` loaded with
``datasets.load_dataset(name, config, split=..., revision=...)``. Tests use local files only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LOCAL_SUFFIXES = (".parquet", ".jsonl", ".json")


class DataPrepError(ValueError):
    """Input that cannot be turned into a dataset; the message names the file, row or column."""


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataPrepError(f"{path}:{lineno}: not valid JSON ({err.msg})") from err
            if not isinstance(row, dict):
                raise DataPrepError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def _read_file(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as err:  # pyarrow raises several types for a corrupt file
            raise DataPrepError(f"{path}: unreadable parquet ({err})") from err
    if path.suffix == ".jsonl":
        return _read_jsonl(path)
    if path.suffix == ".json":
        text = path.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return _read_jsonl(path)  # JSON-lines saved with a .json name
        if isinstance(data, list) and all(isinstance(r, dict) for r in data):
            return data
        raise DataPrepError(f"{path}: expected a JSON list of objects or JSON lines")
    raise DataPrepError(f"{path}: unsupported file type (use one of {', '.join(LOCAL_SUFFIXES)})")


def _load_hub(name: str, config: str | None, split: str, revision: str | None) -> list[dict[str, Any]]:
    import datasets

    try:
        ds = datasets.load_dataset(name, config, split=split, revision=revision)
    except Exception as err:
        raise DataPrepError(
            f"could not load hub dataset {name!r} (config={config!r}, split={split!r}, "
            f"revision={revision!r}): {err}"
        ) from err
    return [dict(row) for row in ds]


def load_rows(
    source: str | Path, *, config: str | None = None, split: str = "train", revision: str | None = None
) -> list[dict[str, Any]]:
    """All rows of ``source`` as plain Python dicts (nested lists/dicts, no numpy)."""
    path = Path(source).expanduser()
    if path.is_file():
        return _read_file(path)
    if path.is_dir():
        root = path / config if config and (path / config).is_dir() else path
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in LOCAL_SUFFIXES)
        if not files:
            raise DataPrepError(f"{root}: no {', '.join(LOCAL_SUFFIXES)} files")
        rows: list[dict[str, Any]] = []
        for f in files:
            rows.extend(_read_file(f))
        return rows
    name = str(source)
    if name.count("/") == 1 and not name.startswith((".", "/", "~")):
        return _load_hub(name, config, split, revision)
    raise DataPrepError(f"{source}: no such file or folder, and not a hub id of the form owner/name")


def describe_source(source: str | Path, *, config: str | None, split: str, revision: str | None) -> dict:
    """Provenance of a source for reports: local path (absolute) or hub id with revision."""
    path = Path(source).expanduser()
    if path.exists():
        return {"local_path": str(path.resolve()), "config": config, "split": split}
    return {"hub_id": str(source), "config": config, "split": split, "revision": revision or "unpinned"}


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write ``rows`` (same keys, nested values allowed) to ``path`` as parquet; returns ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)
    return path
