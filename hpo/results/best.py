"""The best of an experiment's table: the best config, its kept checkpoint, the Pareto front."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpo.errors import ExperimentError, not_a_number
from hpo.results.files import BEST_CHECKPOINT, BEST_RECORD, SWAPPED_OUT, is_number, saved_spec

if TYPE_CHECKING:  # pandas takes 0.3 s to import: only where a table is read
    import pandas as pd

def best_config(frame: pd.DataFrame) -> dict[str, Any]:
    """The config of the best trial (first row), nested back as the trainable saw it."""
    import pandas as pd

    if frame.empty or pd.isna(frame.iloc[0][f"best_{frame.attrs['metric']}"]):
        raise ExperimentError(never_a_number(frame) or "no trial reported the metric yet. "
                              "Hint: wait for the first results, or check the trials' "
                              "error.txt files")
    return row_config(frame.iloc[0])


def never_a_number(frame: pd.DataFrame) -> str | None:
    """Where no trial reported the metric as a number but one reported it as something else
    (a str, a bool; a class trainable's or tune.report's, which hpo.report does not see): what."""
    metric = frame.attrs.get("metric", "")
    values = frame.get(metric, [])  # each trial's last value
    found = next((v for v in values if v is not None and not is_number(v)), None)
    return None if found is None else not_a_number(metric, found)


def kept_best(trial_dir: Path) -> Path | None:
    """A trial's best checkpoint folder (checkpoint.keep_best); None before its first. While a
    better one is put in its place (or when a run was killed right then), the previous one."""
    for name in (BEST_CHECKPOINT, SWAPPED_OUT):
        if (trial_dir / name / BEST_RECORD).is_file():
            return trial_dir / name
    return None


def best_checkpoint(exp_dir: str | Path, frame: pd.DataFrame) -> Path:
    """The best checkpoint folder of the best trial (the first row: best_config's trial)."""
    exp_dir = Path(exp_dir).expanduser().resolve()
    if not (saved_spec(exp_dir).get("checkpoint") or {}).get("keep_best", False):
        raise ExperimentError(f"{exp_dir}: no best checkpoint was kept (checkpoint.keep_best "
                              "was off). Hint: set checkpoint: {keep_best: true} for the next "
                              "run; this run's newest checkpoints are each trial's "
                              "checkpoint_* folders")
    best_config(frame)  # no trial reported the metric yet: that one line
    row = frame.iloc[0]
    found = kept_best(Path(row["path"]))
    if found is None:
        raise ExperimentError(f"{exp_dir}: the best trial {row['trial_id']} has no checkpoint "
                              f"that reported '{frame.attrs['metric']}' yet. Hint: "
                              "hpo.report(metrics, checkpoint=...) keeps one every "
                              "checkpoint.frequency reports; a running trial may not have "
                              "saved its first")
    return found


def front(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows on the Pareto front, best first on the first objective; with one objective,
    the best trial (none before a trial reported the metric)."""
    if "pareto_front" in frame:
        return frame[frame["pareto_front"].astype(bool)]
    if frame.empty:
        return frame
    return frame.head(1).dropna(subset=[f"best_{frame.attrs['metric']}"])


def plain(value: Any) -> Any:
    """A numpy scalar as the Python value (YAML and JSON take only those)."""
    return value.item() if hasattr(value, "item") else value


def row_config(row: pd.Series) -> dict[str, Any]:
    """A row's config/* columns nested back as the trainable saw them."""
    config: dict[str, Any] = {}
    for column, value in row.items():
        if str(column).startswith("config/"):
            *parents, leaf = str(column).removeprefix("config/").split("/")
            node = config
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = plain(value)
    return config
