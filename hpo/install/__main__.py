"""`python -m hpo.install horovod|wheelhouse [OPTIONS]`: the installers without the `hpo` CLI."""

from __future__ import annotations

import sys

from hpo.install import COMMANDS


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in COMMANDS:
        print(f"usage: python -m hpo.install {{{','.join(COMMANDS)}}} [OPTIONS] (--help for "
              "each)", file=sys.stderr)
        return 2
    if args[0] == "horovod":
        from hpo.install.horovod.install import main as command
    else:
        from hpo.install.wheelhouse import main as command
    return command(args[1:])


if __name__ == "__main__":
    sys.exit(main())
