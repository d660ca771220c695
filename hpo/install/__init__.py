"""Installers that ship with hpo: `hpo install horovod` and `hpo install wheelhouse`.

They run without a checkout (`python -m hpo.install horovod --cuda`), import neither torch nor
Ray until a command runs, and import nothing else of hpo: the CLI is their only caller.
"""

from __future__ import annotations

COMMANDS = ("horovod", "wheelhouse")
__all__ = ["COMMANDS"]
