"""Search-algorithm adapters, one model per YAML `search.type`, each builds Ray's searcher."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt, model_validator

from hpo.spec._validation import FieldProblem, Strict, did_you_mean
from hpo.spec.distributions import Distribution

Metric = str | Sequence[str]  # one objective, or several (Optuna only: see hpo.spec.objectives)
TPE_KEYS = ("n_startup_trials", "multivariate", "constant_liar")


class _Searcher(Strict):
    # Also seeds the schedulers' own draws (hpo.driver.schedulers.seedable).
    seed: int | None = None
    # Known-good configurations, run first; each counts as one of num_samples.
    points_to_evaluate: list[dict[str, Any]] = Field(default_factory=list)
    warm_start: str | None = None  # an earlier experiment folder whose trials Optuna learns from

    @model_validator(mode="after")
    def _warm_start_needs_a_model(self) -> _Searcher:
        if self.warm_start is not None and not isinstance(self, Optuna):
            kind = getattr(self, "type", "?")
            raise FieldProblem("warm_start", f"needs search.type optuna (got {kind})",
                               "only a model-based searcher learns from earlier trials: use "
                               "search.type: optuna, or points_to_evaluate to rerun configs")
        return self

    def check_space(self, space: dict[str, Distribution]) -> None:
        """Raise FieldProblem (relative to search_space) if this searcher cannot use it."""

    def check_points(self, space: dict[str, Distribution], num_samples: int) -> None:
        """Raise FieldProblem (relative to search) for a point that is not in the space."""
        if len(self.points_to_evaluate) > num_samples:
            raise FieldProblem("points_to_evaluate", f"{len(self.points_to_evaluate)} points "
                               f"but num_samples is {num_samples}", "each point is one of "
                               "num_samples: raise num_samples or drop points")
        for index, point in enumerate(self.points_to_evaluate):
            for key, value in point.items():
                where = f"points_to_evaluate[{index}].{key}"
                dist = space.get(key)
                if dist is None:
                    raise FieldProblem(where, f"'{key}' is not in search_space",
                                       did_you_mean(str(key), list(space)))
                if dist.kind == "grid":  # Tune crosses every point with the whole grid
                    raise FieldProblem(where, "a grid entry cannot be fixed by a point",
                                       "every point runs with each grid value anyway; "
                                       "drop it from the point")
                why = dist.misfit(value)
                if why:
                    raise FieldProblem(where, why, "use a value the distribution can draw")

    def build(self, metric: Metric, mode: Metric) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError


class Random(_Searcher):
    """Independent random samples; `grid` entries are crossed with every sample."""

    type: Literal["random"]

    def build(self, metric: Metric, mode: Metric) -> Any:
        from ray.tune.search.basic_variant import BasicVariantGenerator

        return BasicVariantGenerator(random_state=self.seed,
                                     points_to_evaluate=list(self.points_to_evaluate) or None)


class Grid(_Searcher):
    """Exhaustive grid: every entry must be a `grid` or a `choice` (which becomes a grid)."""

    type: Literal["grid"]

    def check_space(self, space: dict[str, Distribution]) -> None:
        for name, dist in space.items():
            if dist.kind not in ("grid", "choice"):
                raise FieldProblem(name, f"{dist.kind} cannot be searched on a grid",
                                   "use {grid: [...]} or search.type: random")

    def check_points(self, space: dict[str, Distribution], num_samples: int) -> None:
        if self.points_to_evaluate:  # Tune would run a point instead of a whole grid pass
            raise FieldProblem("points_to_evaluate", "a grid runs every combination already",
                               "drop points_to_evaluate, or use search.type: random/optuna")

    def build(self, metric: Metric, mode: Metric) -> Any:
        from ray.tune.search.basic_variant import BasicVariantGenerator

        return BasicVariantGenerator()


class Optuna(_Searcher):
    """Optuna's TPE (default) or NSGA-II sampler through Ray Tune's OptunaSearch; both search
    several objectives for a Pareto front."""

    type: Literal["optuna"]
    sampler: Literal["tpe", "nsga2"] = "tpe"
    n_startup_trials: PositiveInt = 10
    multivariate: bool = False
    # Trials running side by side count as bad results until they end, so TPE does not
    # propose the same region to every free worker (Optuna's advice for parallel runs).
    constant_liar: bool = True
    population_size: Annotated[int, Field(ge=2)] = 50  # NSGA-II: trials per generation

    @model_validator(mode="after")
    def _keys_of_the_sampler(self) -> Optuna:
        # Only a value other than the default: a saved spec (hpo resume) holds every key.
        foreign = TPE_KEYS if self.sampler == "nsga2" else ("population_size",)
        wrong = [k for k in foreign if getattr(self, k) != type(self).model_fields[k].default]
        if wrong:
            other = "tpe" if self.sampler == "nsga2" else "nsga2"
            raise FieldProblem(wrong[0], f"is not a setting of the {self.sampler} sampler "
                               f"(got {getattr(self, wrong[0])!r})",
                               f"drop it, or use sampler: {other}")
        return self

    def check_space(self, space: dict[str, Distribution]) -> None:
        for name, dist in space.items():
            if dist.kind == "grid":
                raise FieldProblem(name, "grid is not supported by search.type optuna",
                                   "use {choice: [...]} or search.type: grid")

    def build(self, metric: Metric, mode: Metric, searcher_class: Any = None,
              **extra: Any) -> Any:
        """OptunaSearch, or `searcher_class` (a subclass, e.g. the driver's warm start); a
        list of metrics and modes makes a multi-objective study."""
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # Enqueued in the study: the first trials run these, and the sampler learns from them.
        points = list(self.points_to_evaluate) or None
        return (searcher_class or OptunaSearch)(metric=metric, mode=mode,
                                                sampler=self._sampler(optuna),
                                                points_to_evaluate=points, **extra)

    def _sampler(self, optuna: Any) -> Any:
        if self.sampler == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=self.seed,
                                                 population_size=self.population_size)
        return optuna.samplers.TPESampler(
            seed=self.seed, n_startup_trials=self.n_startup_trials,
            multivariate=self.multivariate, constant_liar=self.constant_liar,
        )


Searcher = Annotated[Random | Grid | Optuna, Field(discriminator="type")]
