"""A fast-reporting trial's results reach the driver in batches, one Ray call for many rows.

Each result otherwise costs the driver one Ray actor call and its round trip (about half of the
driver's time per result, in a profile of the driver). Tune has a buffered path: with
TUNE_RESULT_BUFFER_LENGTH > 1 it calls the trial's `train_buffered` and processes the rows it
gets in order, each through the stopper, scheduler, searcher and loggers as if it came alone;
a STOP ends the batch and drops the rows after it. Ray 2.60 calls it with its two arguments
swapped (tune_controller.py `_schedule_trial_train`), so every batch held one row; hpo's
`train_buffered` below takes none of them and ends a batch itself:
  - after BATCH_S seconds or MAX_ROWS rows: a trial reporting every few seconds sends each
    result alone, as before;
  - at a row that carries a checkpoint, ends the trial, or lies on one of the scheduler's
    decision points (`ends`: ASHA's rungs, the stop's training_iteration). A decision on
    any other row is only a STOP by a metric-based criterion, and the rows the trial reported
    past it are dropped: the history on disk ends at the STOP, as without batching.
A batch that ends by time or size lets the trial train on at once, as the rows inside a batch
do: its next report does not wait for the driver's round trip (Tune holds the
training thread at every report until the driver asks for the next row). Only a
batch-ending row holds it until the driver has decided on it. Not where a `stop` on a metric
may land on any row (`trains_on` False): a trial stopped mid-step would keep its actor busy
past Tune's 2 s reset, and the next trial given that actor would fail. The row a trial
reported while training on gets its own step's time as `time_this_iter_s` (Tune would count
from when it asked for the row).

Only where every decision is STOP or CONTINUE (FIFO, ASHA) does hpo turn the batches on
(hpo.driver.run.translate.result_batches): a PAUSE in the middle of a batch would let Tune go on
with the rows after it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from hpo.ray_adapters import train_session

BATCH_S = 1.0  # 0.2 before rows went on during the round trip: 5x the calls, same wall
MAX_ROWS = 1000
ITERATION = "training_iteration"
TIME_THIS_ITER = "time_this_iter_s"
_BATCH_ENDING = ("done", "should_checkpoint", "__duplicate__")  # Tune's own keys


class BatchedResults:
    """A mixin for Tune's function trainable (set as the function's `__mixins__`, which Tune's
    wrap_function puts before FunctionTrainable)."""

    batch_ends: frozenset[int] = frozenset()
    trains_on: bool = False
    _failed: Exception | None = None
    _let_go_at: float | None = None  # time.time() when the trial went on past its report

    def train_buffered(self, *_tune_args: Any) -> list[dict[str, Any]]:
        if self._failed is not None:  # the rows before it went out with the last batch
            failed, self._failed = self._failed, None
            raise failed
        rows: list[dict[str, Any]] = []
        deadline = time.monotonic() + BATCH_S
        while True:
            try:
                row = self.train()  # type: ignore[attr-defined]  # the Trainable's
            except Exception as exc:  # the trial's error: after the rows it reported first
                if not rows:
                    raise
                self._failed = exc
                return rows
            rows.append(row)
            if ends_batch(row, self.batch_ends):
                return rows
            if len(rows) >= MAX_ROWS or time.monotonic() >= deadline:
                if self.trains_on:
                    train_session.train_on()
                    self._let_go_at = time.time()
                return rows

    def step(self) -> dict[str, Any]:
        metrics: dict[str, Any] = super().step()  # type: ignore[misc]  # FunctionTrainable's
        if self._let_go_at is not None:  # trained on since then, and reported at the last report
            reported = train_session.last_report_time() or self._let_go_at
            metrics.setdefault(TIME_THIS_ITER, max(0.0, reported - self._let_go_at))
            self._let_go_at = None
        return metrics


def ends_batch(row: dict[str, Any], ends: frozenset[int]) -> bool:
    """Whether the driver must see this row before the trial reports another."""
    return any(row.get(key) for key in _BATCH_ENDING) or row.get(ITERATION) in ends


def batching(trainable: Any, ends: Iterable[int], trains_on: bool) -> Any:
    """`trainable` (a function, also after tune.with_resources) whose results Tune may batch,
    each batch ending at the latest on one of the iterations `ends`; `trains_on`: no decision
    lands elsewhere, so the trial may train on while the driver takes a batch."""
    batched = type("_Batched", (BatchedResults,),
                   {"batch_ends": frozenset(ends), "trains_on": trains_on})
    trainable.__mixins__ = (batched,)
    return trainable
