"""The corpus split (docs/replay.md, the halves): which conversations tune defaults, which are held out.

A split file (``split.tsv`` in a corpus folder) lists one conversation a line: its path relative to that
folder, its half (``tune`` or ``held-out``) and its source, tab-separated; ``#`` starts a comment. Whole
sources sit on one side, so a rule chosen on the tune half meets agents, tools and output formats it was
not chosen on in the other. ``history-proxy replay --split HALF`` replays one half: a folder argument
stands for the conversations its split file lists, a file argument is kept when a split file in its
folder or one above lists it in that half.

Pure: the caller reads the files (``history_proxy.cli``).
"""

from __future__ import annotations

from pathlib import PurePath

HALVES = ("tune", "held-out")
SPLIT_FILE = "split.tsv"
"""The split file's name in a corpus folder."""


class SplitError(ValueError):
    """A split file that cannot be read as one, or a file no split file places."""


def parse_split(text: str, where: str = SPLIT_FILE) -> dict[str, str]:
    """Each listed path (relative to the split file's folder) and its half. Raises ``SplitError``
    naming the line when one is not ``path<TAB>half[<TAB>source]`` with a known half."""
    halves: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in HALVES:
            raise SplitError(f"{where}, line {number}: expected 'path<TAB>tune|held-out<TAB>source'")
        halves[fields[0]] = fields[1]
    return halves


def half_of(file: PurePath, splits: dict[PurePath, dict[str, str]]) -> str | None:
    """The half of ``file`` in the nearest split file (keyed by its folder) that lists it, or None."""
    for folder in file.parents:
        listed = splits.get(folder)
        if listed is not None:
            relative = file.relative_to(folder).as_posix()
            if relative in listed:
                return listed[relative]
    return None


def in_half(listed: dict[str, str], half: str | None) -> list[str]:
    """The listed paths in ``half`` (every listed path when None), in the file's order."""
    return [path for path, side in listed.items() if half is None or side == half]
