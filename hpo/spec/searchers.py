"""Search-algorithm adapters, one model per YAML `search.type`, each builds Ray's searcher."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt

from hpo.spec._validation import FieldProblem, Strict
from hpo.spec.distributions import Distribution


class _Searcher(Strict):
    # Also seeds the schedulers' draws (runner: seeded_scheduler_draws).
    seed: int | None = None

    def check_space(self, space: dict[str, Distribution]) -> None:
        """Raise FieldProblem (relative to search_space) if this searcher cannot use it."""

    def build(self, metric: str, mode: str) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError


class Random(_Searcher):
    """Independent random samples; `grid` entries are crossed with every sample."""

    type: Literal["random"]

    def build(self, metric: str, mode: str) -> Any:
        from ray.tune.search.basic_variant import BasicVariantGenerator

        return BasicVariantGenerator(random_state=self.seed)


class Grid(_Searcher):
    """Exhaustive grid: every entry must be a `grid` or a `choice` (which becomes a grid)."""

    type: Literal["grid"]

    def check_space(self, space: dict[str, Distribution]) -> None:
        for name, dist in space.items():
            if dist.kind not in ("grid", "choice"):
                raise FieldProblem(name, f"{dist.kind} cannot be searched on a grid",
                                   "use {grid: [...]} or search.type: random")

    def build(self, metric: str, mode: str) -> Any:
        from ray.tune.search.basic_variant import BasicVariantGenerator

        return BasicVariantGenerator()


class Optuna(_Searcher):
    """Optuna's TPE sampler through Ray Tune's OptunaSearch."""

    type: Literal["optuna"]
    n_startup_trials: PositiveInt = 10
    multivariate: bool = False
    # Trials running side by side count as bad results until they end, so TPE does not
    # propose the same region to every free worker (Optuna's advice for parallel runs).
    constant_liar: bool = True

    def check_space(self, space: dict[str, Distribution]) -> None:
        for name, dist in space.items():
            if dist.kind == "grid":
                raise FieldProblem(name, "grid is not supported by search.type optuna",
                                   "use {choice: [...]} or search.type: grid")

    def build(self, metric: str, mode: str) -> Any:
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(
            seed=self.seed, n_startup_trials=self.n_startup_trials,
            multivariate=self.multivariate, constant_liar=self.constant_liar,
        )
        return OptunaSearch(metric=metric, mode=mode, sampler=sampler)


Searcher = Annotated[Random | Grid | Optuna, Field(discriminator="type")]
