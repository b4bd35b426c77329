"""What the bench prints is what it means: data that passes through the
console renderer (install hints, error texts, kernel and case names) keeps
its "[...]" -- rich would read `mosaic_rt[mpi]` as a style tag and drop it."""

import importlib
import io
import sys
import types
from contextlib import redirect_stdout

import pytest
from mosaic_rt.bench import cli, console, multi_process, report
from mosaic_rt.bench.row_cold_first_call import ROW as COLD
from mosaic_rt.bench.row_multi_process import ROW as MULTI_PROCESS
from mosaic_rt.bench.row_production_kernels import ROW as PRODUCTION
from mosaic_rt.bench.row_suite_workload import ROW as SUITE
from mosaic_rt.bench.row_tpu_check import ROW as TPU_CHECK
from mosaic_rt.bench.targets import Verdict

rich_console = pytest.importorskip("rich.console")


@pytest.fixture(params=["rich", "plain"])
def kind(request):
    """Each test on rich's console and on the plain one (the bench without
    the `bench` extra: console.py imported with rich unavailable)."""
    if request.param == "rich":
        yield "rich"
        return
    saved = {name: m for name, m in sys.modules.items() if name == "rich" or name.startswith("rich.")}
    sys.modules.update(dict.fromkeys(saved))  # every rich import now fails
    try:
        importlib.reload(console)
        assert console._RichConsole is None
        yield "plain"
    finally:
        sys.modules.update(saved)
        importlib.reload(console)


def _printed(kind, draw) -> str:
    """What `draw(console)` shows on a rich console or on the plain one."""
    if kind == "rich":
        c = rich_console.Console(record=True, width=400, file=io.StringIO())
        draw(c)
        return c.export_text()
    out = io.StringIO()
    with redirect_stdout(out):
        draw(console.make_console())
    return out.getvalue()


def test_multi_process_row_without_mpirun_names_the_whole_install_line(kind, monkeypatch):
    monkeypatch.setattr(multi_process, "mpirun", lambda: None)
    d = MULTI_PROCESS.run(None)  # every part answers with the install hint
    summary = _printed(kind, lambda c: c.print(MULTI_PROCESS.summary(d)))
    assert summary.count('no mpirun: pip install "mosaic_rt[mpi]"') == 3, summary
    assert _printed(kind, lambda c: MULTI_PROCESS.render(c, d)).count('"mosaic_rt[mpi]"') == 3


def test_tpu_check_row_skipped_keeps_the_install_line(kind):
    d = {"ok": True, "skipped": 'libtpu not installed (pip install "mosaic_rt[tpu]")'}
    assert 'pip install "mosaic_rt[tpu]")' in _printed(kind, lambda c: c.print(TPU_CHECK.summary(d)))
    assert 'pip install "mosaic_rt[tpu]")' in _printed(kind, lambda c: TPU_CHECK.render(c, d))


def test_error_texts_and_names_in_tables_keep_their_brackets(kind):
    production = {"kernels": [{"name": "gmm[bf16]", "error": "ValueError: block [8, 128] of [16, 64]"}]}
    shown = _printed(kind, lambda c: PRODUCTION.render(c, production))
    assert "gmm[bf16]" in shown and "NO ValueError: block [8, 128] of [16, 64]" in shown

    suite = {
        "distinct_kernels": 1,
        "families": {"grid[dyn]": {"kernels": 1, "stock_s": 1.0, "ours_s": 0.5, "ratio": 2.0}},
        "passes": [],
        "kernels": [
            {"name": "add[zero]", "pass": 0, "ok": False, "equal": True, "error": "IndexError: [row] out of range"}
        ],
    }
    shown = _printed(kind, lambda c: SUITE.render(c, suite))
    assert "grid[dyn]" in shown and "suite kernel add[zero] (pass 1): IndexError: [row] out of range" in shown

    family = {"family": "ping[pong]", "stock_median_s": 1.0, "ours_median_s": 0.5, "ratio": 2.0}
    cold = {
        "reps_per_side": 1,
        "families": [{**family, "ok": False, "error": "ours: KeyError: [x]"}],
        "stock_total_s": 1.0,
        "ours_total_s": 0.5,
        "ratio": 2.0,
        "persistent_cache_hits": 0,
    }
    shown = _printed(kind, lambda c: COLD.render(c, cold))
    assert "ping[pong]" in shown and "NO ours: KeyError: [x]" in shown

    verdicts = [Verdict("cold[all]", 5.0, 6.0, "sum over [all] families", True)]
    shown = _printed(kind, lambda c: report.render(c, [], verdicts))
    assert "cold[all]" in shown and "sum over [all] families" in shown


def test_a_failed_case_line_keeps_its_name_and_error(kind):
    result = types.SimpleNamespace(
        case=types.SimpleNamespace(name="ring[big]"), error="RuntimeError: [mosaic_rt#3] [bold]"
    )
    assert "ERROR ring[big]: RuntimeError: [mosaic_rt#3] [bold]" in _printed(
        kind, lambda c: c.print(cli._one_line(result))
    )


def test_style_tags_still_style_and_escaped_data_prints_once():
    # The escaping must not leave a backslash or eat the tags the CLI means.
    shown = _printed("rich", lambda c: c.print(f"[bold red]FAILED[/] {console.escape('x [mpi]')}"))
    assert shown.strip() == "FAILED x [mpi]"
    assert console.escaped(["a[1]", 2]) == [console.escape("a[1]"), "2"]


def test_the_plain_console_fixture_restores_rich():
    assert console._RichConsole is not None
