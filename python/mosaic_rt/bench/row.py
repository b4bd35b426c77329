"""One bench row beyond the per-kernel cases: what it measures and how it shows.

A row is one object in a module of its own (`row_<key>.py`); `rows.ROWS`
lists them. The harness only calls these methods: it runs the row, prints
its summary line, adds its verdicts to the targets table and prints its
tables (console and Markdown) from the JSON-ready dict `run` returned, so a
saved results file renders as the run did.
"""

from __future__ import annotations


class Row:
    name: str  # what --filter matches, and --list shows
    key: str  # its key under "rows" in the JSON
    devices: int = 1  # CPU devices the row needs

    def run(self, budget) -> dict:
        """Measures; the dict is saved as it is (with "ok": False when an
        output differs)."""
        raise NotImplementedError

    def summary(self, d: dict) -> str:
        """The line printed when the row has run."""
        raise NotImplementedError

    def verdicts(self, d: dict) -> list:
        """Its targets (`targets.Verdict`s); none by default."""
        return []

    def render(self, console, d: dict) -> None:
        """Its tables on the console."""
        raise NotImplementedError

    def markdown(self, d: dict) -> list[str]:
        """Its tables as Markdown lines (for benches/RESULTS.md)."""
        raise NotImplementedError


def mismatch_note(d: dict) -> str:
    """What a summary line adds when the row's outputs differ."""
    return "" if d.get("ok", True) else ", [bold red]MISMATCH[/]"
