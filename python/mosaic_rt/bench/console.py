"""Terminal output of the bench: rich when installed, plain text otherwise.

rich is optional (the `bench` extra) so that installing mosaic_rt beside a
user's jax adds nothing jax does not already bring. Without it the CLI prints
the same lines and tables as plain text, with no colours and no live bar.
"""

from __future__ import annotations

import re

try:
    from rich.console import Console as _RichConsole
    from rich.markup import escape
    from rich.table import Table
except ImportError:
    _RichConsole = None

HINT = "plain output: pip install 'mosaic_rt[bench]' for a progress bar and coloured tables"

# Style tags the CLI writes ("[bold red]", "[green]", "[/]"), not escaped ones.
_TAG = re.compile(r"(?<!\\)\[(?:/|/?[a-z][a-z ]*)\]")


def escaped(cells) -> list[str]:
    """Table cells of data (names, error texts) that must print as written:
    a "[...]" in them is text, not a style tag."""
    return [escape(str(c)) for c in cells]


def _plain(text: str) -> str:
    return _TAG.sub("", text).replace("\\[", "[")


if _RichConsole is None:

    def escape(text: str) -> str:  # the fallback of rich.markup.escape
        return text.replace("[", "\\[")

    class Table:  # the subset of rich.table.Table the bench uses
        def __init__(self, title: str = ""):
            self.title, self.columns, self.rows = title, [], []

        def add_column(self, name: str, justify: str = "left", no_wrap: bool = False):
            self.columns.append((name, justify))

        def add_row(self, *cells: str):
            self.rows.append([_plain(str(c)) for c in cells])

        def render(self) -> str:
            header = [name for name, _ in self.columns]
            widths = [max(len(r[i]) if i < len(r) else 0 for r in [header, *self.rows]) for i in range(len(header))]

            def line(cells):
                out = []
                for (_, justify), width, cell in zip(self.columns, widths, cells):
                    out.append(cell.rjust(width) if justify == "right" else cell.ljust(width))
                return "  ".join(out).rstrip()

            rule = "  ".join("-" * w for w in widths)
            return "\n".join([_plain(self.title), line(header), rule, *(line(r) for r in self.rows)])


class _PlainConsole:
    is_terminal = False

    def print(self, obj: object = "") -> None:
        print(obj.render() if isinstance(obj, Table) else _plain(str(obj)), flush=True)


class _PlainProgress:
    """Same calls as rich.progress.Progress; prints one line per step instead."""

    def __init__(self, console: _PlainConsole):
        self.console, self._done, self._total = console, 0, 0

    def __enter__(self):
        self.console.print(escape(f"({HINT})"))
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, description: str, total: int) -> int:
        self._total = total
        self.console.print(f"{description} ...")
        return 0

    def update(self, task: int, description: str) -> None:
        if self._done < self._total:
            self.console.print(f"({self._done + 1}/{self._total}) {description} ...")

    def advance(self, task: int) -> None:
        self._done += 1


def make_console():
    if _RichConsole is None:
        return _PlainConsole()
    console = _RichConsole()
    if not console.is_terminal:  # pipes and files: keep table rows on one line
        console = _RichConsole(width=200)
    return console


def make_progress(console):
    if _RichConsole is None:
        return _PlainProgress(console)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description:<34}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
