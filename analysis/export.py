"""`pcnlab export RUN_OR_EXPERIMENT --parquet OUT`: the tables of `pcnlab.analysis.results` as Parquet files, for
notebooks and tools that do not speak Python (DuckDB, R's arrow, Spark, ...).

OUT/<table>.parquet for each table of a run (`queue`, `iterations`, `events`, `flows`, `iteration_table`:
the attributes of `pcnlab.analysis.results.RunData`), every run of the folder in one file with a `run` column
first; and `metrics.parquet`, the experiment's table of runs (`load_results`). A table no run has
is not written. Values of a column that mix kinds (an event field that is a number in one event and a
list in another) are written as their JSON text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from pcnlab.errors import UsageError
from pcnlab.analysis.results import load_results

TABLES = ("queue", "iterations", "events", "flows", "iteration_table")


def _arrow_ready(frame: pd.DataFrame):
    """The frame as an Arrow table; object columns Arrow cannot type become JSON text."""
    import pyarrow as pa

    columns = {}
    for name in frame.columns:
        column = frame[name]
        try:
            columns[str(name)] = pa.array(column, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            columns[str(name)] = pa.array(
                [None if _missing(v) else json.dumps(v, default=str) for v in column], type=pa.string())
    return pa.table(columns)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def export_parquet(path: Path | str, out: Path | str, say=print) -> list[Path]:
    """Write the Parquet files of a run, a sweep or an experiment folder into `out` (created)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("pyarrow is not installed in this Python; run `make deps` (or "
                         "`.venv/bin/python -m pip install pyarrow`)") from None
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file; --parquet takes a folder to write the tables into")
    runs, metrics = load_results(path)     # a one-line UsageError for a missing or empty folder
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot make {out} ({exc.strerror}); give --parquet a folder you can write") from None
    written = []
    for table in TABLES:
        parts = [getattr(run, table).assign(run=run.name) for run in runs]
        parts = [p for p in parts if not p.empty]
        if not parts:
            continue
        frame = pd.concat(parts, ignore_index=True)
        frame = frame[["run", *[c for c in frame.columns if c != "run"]]]
        written.append(out / f"{table}.parquet")
        pq.write_table(_arrow_ready(frame), written[-1])
    written.append(out / "metrics.parquet")
    pq.write_table(_arrow_ready(metrics), written[-1])
    say(f"exported {len(runs)} run(s) of {path}: " + ", ".join(p.name for p in written) + f" in {out}")
    return written
