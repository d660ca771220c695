"""`hpo local up|down|status`: a warm local Ray that `hpo run` and `hpo resume` use
(hpo.cluster.warm), so that a run on this machine skips Ray's start-up."""

from __future__ import annotations

import typer

from hpo.cli._shared import guarded, out

local_app = typer.Typer(no_args_is_help=True,
                        help="A warm local Ray for `hpo run` / `hpo resume` on this machine.")


@local_app.command()
@guarded
def up(cpus: int | None = typer.Option(None, min=1, metavar="N",
                                          help="CPUs it offers (default: all)."),
       gpus: int | None = typer.Option(None, min=0, help="GPUs it offers (default: all).")
       ) -> None:
    """Start it; runs without --cpus (or with the same) use it until `hpo local down`."""
    from hpo.cluster import warm

    cluster = warm.up(cpus, gpus)
    out.print(f"warm Ray up at {cluster.address} ({warm.folder()}); `hpo run` and `hpo resume` "
              "use it, `hpo local down` stops it", highlight=False, soft_wrap=True)


@local_app.command()
@guarded
def down() -> None:
    """Stop it (the trials of a run still using it end with it)."""
    from hpo.cluster import warm

    count = warm.down()
    out.print(f"warm Ray down ({count} process(es) stopped)" if count else "no warm Ray was up",
              highlight=False)


@local_app.command()
@guarded
def status() -> None:
    """Say whether one is up, where, and with how many CPUs."""
    from hpo.cluster import warm

    warm_ray = warm.running()
    if warm_ray is None:
        out.print("no warm Ray is up. Hint: `hpo local up`", highlight=False)
        return
    cluster, cpus = warm_ray
    out.print(f"warm Ray up at {cluster.address}, {cpus or 'all'} CPUs ({warm.folder()})",
              highlight=False)
