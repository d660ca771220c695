"""`hpo install horovod|wheelhouse`: the installers in hpo.install, behind the `hpo` CLI.

The options are the installers' own (argparse, so `python -m hpo.install` takes the same):
this module forwards them untouched and imports the installer only when a command runs.
"""

from __future__ import annotations

import typer

install_app = typer.Typer(no_args_is_help=True,
                          help="Install what hpo builds from source (Horovod), or a wheelhouse "
                          "for offline nodes.")
# Everything after the command name goes to the installer, --help included.
FORWARD = {"allow_extra_args": True, "ignore_unknown_options": True}


@install_app.command(context_settings=FORWARD, add_help_option=False)
def horovod(ctx: typer.Context) -> None:
    """Build Horovod 0.28.1 for this Python's torch and install it (--cuda: with NCCL)."""
    from hpo.install.horovod.install import main

    raise typer.Exit(main(list(ctx.args)))


@install_app.command(context_settings=FORWARD, add_help_option=False)
def wheelhouse(ctx: typer.Context) -> None:
    """Fill DIR with the wheels an offline node needs (hpo's, torch, Horovod's)."""
    from hpo.install.wheelhouse import main

    raise typer.Exit(main(list(ctx.args)))
