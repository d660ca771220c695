"""What ends Tune's fit early, said in one line: a metric or a stop key that results lack, and
an error a callback, searcher or scheduler raised in the driver (Tune wraps it in a TuneError
whose message is the whole traceback)."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from pathlib import Path

from hpo.driver.run.outcome import missing_metric
from hpo.errors import HpoError, RunError
from hpo.spec.model import Spec

_HPO_PACKAGE = str(Path(__file__).resolve().parent.parent)


@contextlib.contextmanager
def said_in_one_line(spec: Spec) -> Iterator[None]:
    """While the block (Tune's fit) runs, what ends it early becomes one RunError."""
    from ray.tune import TuneError

    from hpo.driver.plugins.stop_keys import StopKeyNotReported

    try:
        yield
    except (ValueError, TuneError) as exc:  # Tune's strict metric check aborts the experiment
        if "did not include the specified metric" in str(exc):
            raise RunError(missing_metric(str(exc), spec)) from exc
        missing_stop = cause(exc, StopKeyNotReported)  # hpo's own check of the stop keys
        if missing_stop is not None:
            raise RunError(str(missing_stop)) from exc
        raised = _wrapped(exc) if isinstance(exc, TuneError) else None
        if isinstance(raised, HpoError):
            raise raised from exc  # its own line and exit code
        if raised is not None and (said := _driver_error(raised)):
            raise said from exc
        raise


def cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """`exc` or the first exception of `kind` in its chain (Tune wraps a callback's own)."""
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, kind):
        seen = seen.__cause__ or seen.__context__
    return seen


def _wrapped(exc: BaseException) -> BaseException | None:
    """The first exception in the chain of Tune's TuneError that is not one."""
    from ray.tune import TuneError

    seen: BaseException | None = exc
    while isinstance(seen, TuneError):
        seen = seen.__cause__ or seen.__context__
    return seen


def _driver_error(raised: BaseException) -> RunError | None:
    """One line naming the error and the first frame of its traceback outside Ray (the
    callback's own method, not the library it called); None for hpo's own code, whose
    traceback is wanted as it is."""
    import ray

    ray_package = str(Path(ray.__file__).resolve().parent)
    frames = [frame for frame in traceback.extract_tb(raised.__traceback__)
              if not str(Path(frame.filename).resolve()).startswith(ray_package)]
    if not frames or str(Path(frames[0].filename).resolve()).startswith(_HPO_PACKAGE):
        return None
    where = frames[0]
    said = (str(raised).strip().splitlines() or [""])[0]
    return RunError(f"the run stopped on an error raised in the driver (a callback, searcher "
                    f"or scheduler): {type(raised).__name__}: {said} (in {where.name}, "
                    f"{Path(where.filename).name}:{where.lineno}). Hint: --debug, or the "
                    "exception's chain from Python, shows the traceback")
