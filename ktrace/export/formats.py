"""The output formats: one writer module each, found through one registry.

Each format's writer module declares a :class:`Format` named ``FORMAT``: its name, the file
extensions that select it, about how many bytes an event takes, and how a trace too large for
one file is split. :data:`WRITERS` names those modules, one line per format. ``ktrace merge``
(its ``--format`` choices and the format an output's name asks for), ``write_trace``, the split
traces (``ktrace.export.split``: their parts' budgets and size estimates) and ``ktrace open``
(which formats the Perfetto UI opens as they are) read the formats from here and nowhere else.

Adding a format is its writer module and its line in :data:`WRITERS`. The writer modules are
imported when a format is first asked for (the command line builds its parser without them).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

#: The writer modules, one per format (each declares ``FORMAT``).
WRITERS = (
    "ktrace.export.capture_file",
    "ktrace.export.perfetto",
    "ktrace.export.chrome",
)

#: How a format splits a trace too large for one file: runs of launches (the same launch indices
#: of every rank), and groups of ranks of a run still too large (``ktrace.export.split``).
SPLIT_BY_LAUNCHES = "launches"


@dataclass(frozen=True)
class Format:
    """One output format, as its writer module declares it.

    Attributes:
        name: what ``--format`` calls it.
        extensions: the file name endings that select it (lower case, with the dot).
        write: ``write(capture, path, **options)``: writes the file, returns its path.
        bytes_per_event: about the bytes one event takes (sizes a split trace's parts: their
            events are at most the budget over this; large outputs are written with direct I/O).
        bytes_by_kind: bytes per event of each kind (SPAN, INSTANT, COUNTER, WAIT, NOTIFY) and per
            launch, ``((span, instant, counter, wait, notify), per_launch)``: what a trace's size
            is estimated by before it is written (a least-squares fit of written sizes), or None.
        split: how a trace too large for one file is split (:data:`SPLIT_BY_LAUNCHES`), or None:
            never split.
        part_bytes: the default budget of one part of a split trace (what the Perfetto UI opens
            comfortably), or None.
        ui: whether the Perfetto UI opens its files as they are (``ktrace open`` converts the
            others).
    """

    name: str
    extensions: tuple[str, ...]
    write: Callable = field(repr=False)
    bytes_per_event: int
    bytes_by_kind: tuple | None = None
    split: str | None = None
    part_bytes: int | None = None
    ui: bool = True

    def __post_init__(self):
        if not self.extensions or any(not e.startswith(".") or e != e.lower() for e in self.extensions):
            raise ValueError(f"format {self.name}: extensions must be lower-case endings with the dot, got {self.extensions}")
        if self.bytes_per_event <= 0:
            raise ValueError(f"format {self.name}: bytes_per_event must be > 0")
        if self.split is not None and (self.split != SPLIT_BY_LAUNCHES or not self.part_bytes or self.part_bytes < 1):
            raise ValueError(f"format {self.name}: a split format splits by {SPLIT_BY_LAUNCHES!r} with a part budget")


_REGISTRY: dict[str, Format] | None = None


def formats() -> dict[str, Format]:
    """Every registered format by name, in :data:`WRITERS`' order."""
    global _REGISTRY
    if _REGISTRY is None:
        found: dict[str, Format] = {}
        for mod in WRITERS:
            f = importlib.import_module(mod).FORMAT
            if f.name in found:
                raise ValueError(f"two writers declare the format {f.name!r}")
            found[f.name] = f
        _REGISTRY = found
    return _REGISTRY


def get(name: str) -> Format:
    """The format called ``name``; ValueError naming the formats there are."""
    f = formats().get(name)
    if f is None:
        raise ValueError(f"unknown format {name!r} ({', '.join(formats())})")
    return f


def extensions() -> list[str]:
    """Every registered extension, in registry order."""
    return [e for f in formats().values() for e in f.extensions]


def format_of(path) -> str:
    """The name of the format a file name asks for; ValueError when its ending says none."""
    name = str(path).lower()
    for f in formats().values():
        if name.endswith(f.extensions):
            return f.name
    raise ValueError(f"cannot tell the format of {path}: use a suffix among {', '.join(extensions())} or pass a format")


def split_names() -> list[str]:
    """The formats a trace can be split into."""
    return [f.name for f in formats().values() if f.split is not None]


class Names:
    """The registered formats' names, read when first asked: ``argparse``'s ``choices`` (give the
    option a ``metavar``, so that building the parser reads nothing)."""

    def __contains__(self, name: object) -> bool:
        return name in formats()

    def __iter__(self) -> Iterator[str]:
        return iter(formats())

    def __len__(self) -> int:
        return len(formats())


__all__ = ["Format", "Names", "SPLIT_BY_LAUNCHES", "WRITERS", "extensions", "format_of", "formats", "get", "split_names"]
