"""The product speaks of the product: no document, comment or test tells who changed what in
which working session, points to a tracker that is not in the repository, or keeps a dated
log. History lives in the commit messages. A hit names the file and the line to rewrite as
the fact (and, where it helps, the measured reason)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEARCHED = ["docs", "hpo", "tests", "benchmarks", "README.md", "slurm"]
SUFFIXES = {".md", ".py", ".sh", ".yaml", ".yml", ".toml", ".txt", ".j2", ".sbatch", ""}
# Built from parts so that this file does not match itself.
WORDS = re.compile("|".join([
    r"\bsess" + r"ion\s+[0-9]+",            # a working session by number
    r"\bthis\s+sess" + r"ion\b",             # ... or by "this"
    r"\biss" + r"ue[\s-]+#?[0-9]+",          # a tracker's number
]), re.IGNORECASE)
# A Markdown heading that dates its section: a log entry, not a reference.
DATED_HEADING = re.compile(r"^#{1,6}\s.*\b20[0-9]{2}-[0-9]{2}-[0-9]{2}\b")


def _files() -> list[Path]:
    found: list[Path] = []
    for name in SEARCHED:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        found += [f for f in candidates if f.is_file() and f.suffix in SUFFIXES
                  and "__pycache__" not in f.parts and f != Path(__file__).resolve()]
    return found


def _hits(path: Path) -> list[str]:
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        return []
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        if WORDS.search(line) or (path.suffix == ".md" and DATED_HEADING.match(line)):
            hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    return hits


def test_the_patterns_catch_what_they_are_for() -> None:
    for line in ["Sess" "ion 36 (2026-11-30): two levers", "as th" "is session found",
                 "(iss" "ue 16.2)", "see iss" "ue #12", "the iss" "ue-2 targets"]:
        assert WORDS.search(line), line
    for line in ["Ray's session folder", "session_2026-11-21_11-19-13", "a test session",
                 "an issue with the port"]:
        assert not WORDS.search(line), line
    assert DATED_HEADING.match("### Earlier: 2026-11-28 09:34 UTC")
    assert not DATED_HEADING.match("Command: ... (run 2026-11-21 12:11 UTC)")


def test_no_history_words_in_the_product() -> None:
    hits = [hit for path in _files() for hit in _hits(path)]
    assert not hits, ("state the fact instead of the history (the history belongs in commit "
                      "messages):\n" + "\n".join(hits))
