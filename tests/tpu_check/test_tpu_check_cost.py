"""What the TPU compile check costs: its answers cached on disk across
processes (and libtpu not even started when every answer is there), a
fingerprint that is the same in every process, the optional worker-thread
compile, and `report()`.

Tests that compile need libtpu (see tests/tpu_check/test_tpu_check.py); the disk cache
itself and the fingerprint are tested without it."""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from mosaic_rt.tpu_check import check, disk_cache, targets


def _has_libtpu() -> bool:
    try:
        import libtpu  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture
def libtpu():
    if not _has_libtpu():
        message = f"libtpu is not installed ({check.install_command()})"
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must install it (scripts/test.sh)")
        pytest.skip(message)


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    monkeypatch.delenv(targets.ENV_TARGET, raising=False)
    monkeypatch.delenv(targets.ENV_MODE, raising=False)
    monkeypatch.delenv(check.ENV_OVERLAP, raising=False)
    monkeypatch.setenv(disk_cache.ENV_DIR, str(tmp_path / "cache"))
    targets.set_default_target(None)
    check.clear_cache()
    yield
    targets.set_default_target(None)
    check.clear_cache()


def add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def blocked(block, *, rows=16, **params):
    return pl.pallas_call(
        add_one,
        out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.float32),
        grid=(rows // block[0],),
        in_specs=[pl.BlockSpec(block, lambda i: (i, 0))],
        out_specs=pl.BlockSpec(block, lambda i: (i, 0)),
        interpret=mosaic_rt.InterpretParams(**params),
    )


X = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)


def _entries(root) -> list:
    return sorted(p for p in root.glob("*.json")) if root.is_dir() else []


def _run(code: str, env: dict, *, background: bool = False):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **env}
    args = [sys.executable, "-c", textwrap.dedent(code)]
    if background:
        return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------ the directory


def test_cache_directory_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(disk_cache.ENV_DIR, str(tmp_path / "here"))
    assert disk_cache.directory() == tmp_path / "here"
    for off in ("", "0", "off", "OFF", " no "):
        monkeypatch.setenv(disk_cache.ENV_DIR, off)
        assert disk_cache.directory() is None
        assert not disk_cache.store("k", {"outcome": {}}) and disk_cache.load("k") is None
    monkeypatch.delenv(disk_cache.ENV_DIR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert disk_cache.directory() == tmp_path / "xdg" / "mosaic_rt" / "tpu_check"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert disk_cache.directory() == tmp_path / "home" / ".cache" / "mosaic_rt" / "tpu_check"


def test_store_and_load_and_what_is_ignored(tmp_path):
    root = disk_cache.directory()
    entry = {"kernel": "k", "outcome": {"generation": "v5e", "ok": True}}
    assert disk_cache.load("a" * 64) is None  # nothing there yet (no directory)
    assert disk_cache.store("a" * 64, entry)
    assert disk_cache.load("a" * 64) == {**entry, "key": "a" * 64}
    path = root / ("a" * 64 + ".json")
    for damaged in (
        b"{not json",
        b"",
        b"[1, 2]",
        b'{"key": "other", "outcome": {}}',
        json.dumps({"key": "a" * 64, "outcome": 3}).encode(),
    ):
        path.write_bytes(damaged)
        assert disk_cache.load("a" * 64) is None
    assert [p.name for p in root.iterdir()] == [path.name]  # no temporary file left


def test_eviction_keeps_the_most_recently_used(tmp_path):
    root = disk_cache.directory()
    for i in range(30):
        assert disk_cache.store(f"{i:02d}", {"outcome": {}})
        os.utime(root / f"{i:02d}.json", (1000 + i, 1000 + i))
    os.utime(root / "00.json", (5000, 5000))  # used last
    stale = root / ".tmp-left-by-a-killed-writer.json"
    stale.write_text("{")
    os.utime(stale, (1, 1))
    disk_cache._evict(root, limit=20)
    kept = {p.stem for p in _entries(root)}
    assert len(kept) == 18 and "00" in kept and "01" not in kept and "29" in kept
    assert not stale.exists()


WRITER = """
import json, os, sys
from mosaic_rt.tpu_check import disk_cache
me = sys.argv[1]
torn = 0
for i in range(300):
    disk_cache.store("same", {"writer": me, "i": i, "pad": me * 2000, "outcome": {}})
    got = disk_cache.load("same")
    torn += got is None or got["pad"] != got["writer"] * 2000
print(json.dumps({"torn": torn}))
"""


def test_two_processes_writing_one_entry(tmp_path):
    env = {**os.environ, disk_cache.ENV_DIR: str(disk_cache.directory())}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, who], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for who in "ab"
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert json.loads(out) == {"torn": 0}
    entry = disk_cache.load("same")
    assert entry["i"] == 299 and entry["writer"] in "ab"
    assert [p.name for p in disk_cache.directory().iterdir()] == ["same.json"]


# ------------------------------------------------------------ fingerprint

FINGERPRINTS = """
import functools, json
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import mosaic_rt
from mosaic_rt.tpu_check import check

keys = []
def spy(args, kernel_params, interpret_params, overlap=None, **kw):
    pending = real(args, kernel_params, interpret_params, overlap=False, **kw)
    keys.append(pending._request.key)
    return None  # no compile: only the fingerprint
real, check.start_check = check.start_check, spy

params = mosaic_rt.InterpretParams(tpu_target="v5e")
x = np.ones((16, 128), np.float32)

def add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0

def call(index_map, block=(8, 128), **kw):
    return pl.pallas_call(add_one, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                          grid=(2,), in_specs=[pl.BlockSpec(block, index_map)],
                          out_specs=pl.BlockSpec(block, lambda i: (i, 0)),
                          interpret=params, **kw)(x)

call(lambda i: (i, 0))
call(lambda i: (i, 0))                        # the same kernel again
call(lambda i: (1 - i, 0))                    # only the index map differs
call(lambda i: (i, 0), compiler_params=pltpu.CompilerParams(vmem_limit_bytes=2**24))

def scratch(x_ref, o_ref, s_ref):
    s_ref[0:8, :] = x_ref[...]
    o_ref[...] = s_ref[0:8, :]

for rows in (8, 16):                          # only the scratch shape differs
    pl.pallas_call(scratch, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                   scratch_shapes=[pltpu.VMEM((rows, 128), jnp.float32)],
                   in_specs=[pl.BlockSpec((8, 128), lambda: (0, 0))],
                   out_specs=pl.BlockSpec((8, 128), lambda: (0, 0)),
                   interpret=params)(x[:8])

def gather(idx_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...]

spec = pltpu.PrefetchScalarGridSpec(
    num_scalar_prefetch=1, grid=(2,),
    in_specs=[pl.BlockSpec((8, 128), lambda i, idx: (idx[i], 0))],
    out_specs=pl.BlockSpec((8, 128), lambda i, idx: (i, 0)))
pl.pallas_call(gather, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
               grid_spec=spec, interpret=params)(jnp.array([1, 0], jnp.int32), x)

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
f = jax.shard_map(lambda a: pl.pallas_call(
        add_one, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), interpret=params)(a),
    mesh=mesh, in_specs=jax.sharding.PartitionSpec("x"),
    out_specs=jax.sharding.PartitionSpec("x"), check_vma=False)
jax.jit(f)(x)
print(json.dumps(keys))
"""


def test_fingerprint_is_the_same_in_every_process():
    env = {"JAX_NUM_CPU_DEVICES": "2"}
    first = _run(FINGERPRINTS, {**env, "PYTHONHASHSEED": "1"})
    second = _run(FINGERPRINTS, {**env, "PYTHONHASHSEED": "2"})
    assert first == second
    assert first[0] == first[1]  # the same kernel twice
    distinct = [first[0]] + first[2:]
    assert len(set(distinct)) == len(distinct), first  # anything else differs: another key


# -------------------------------------------------------- with the compiler

CHECKER = """
import json, sys, warnings
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl
import mosaic_rt
from mosaic_rt.tpu_check import check

def add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0

def blocked(block, rows=16):
    return pl.pallas_call(
        add_one, out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.float32),
        grid=(rows // block[0],), in_specs=[pl.BlockSpec(block, lambda i: (i, 0))],
        out_specs=pl.BlockSpec(block, lambda i: (i, 0)),
        interpret=mosaic_rt.InterpretParams(tpu_target="v5e", tpu_check="warn"))

x = np.zeros((16, 128), np.float32)
blocked((8, 128))(x)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    blocked((4, 128))(x)
from mosaic_rt import jax_internals as jx
s = check.stats
print(json.dumps({"compiles": s.compiles, "disk_hits": s.disk_hits, "failures": s.failures,
                  "topologies": len(check._topologies),
                  "libtpu_started": jx.tpu_compiler_loaded(),
                  "warnings": [str(w.message) for w in caught],
                  "report": check.report()}))
"""


def test_second_process_compiles_nothing(libtpu, tmp_path):
    env = {disk_cache.ENV_DIR: str(tmp_path / "shared")}
    # Two processes at once, both cold: each compiles what the other has not
    # stored yet, both may write the same entries. Which one gets there first is
    # up to the scheduler (a process that starts late may find both entries
    # stored), so only the totals are fixed: every check answered once per
    # process, every entry compiled by at least one of them.
    procs = [_run(CHECKER, env, background=True) for _ in range(2)]
    cold = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        cold.append(json.loads(out.strip().splitlines()[-1]))
    for c in cold:
        assert c["compiles"] + c["disk_hits"] == 2, c
    assert 2 <= sum(c["compiles"] for c in cold) <= 4, cold
    assert len(_entries(tmp_path / "shared")) == 2
    warm = _run(CHECKER, env)
    assert (warm["compiles"], warm["disk_hits"], warm["failures"]) == (0, 2, 0)
    assert warm["topologies"] == 0 and not warm["libtpu_started"]  # libtpu never started
    # The same verdict, word for word.
    assert len(warm["warnings"]) == 1 and warm["warnings"] == cold[0]["warnings"]
    assert "divisible by 8 and 128" in warm["warnings"][0]
    assert [r["cached"] for r in warm["report"]] == [True, True]
    assert [r["ok"] for r in warm["report"]] == [True, False]
    assert warm["report"][0]["memory"] == cold[0]["report"][0]["memory"]


def test_disk_cache_off_compiles_again(libtpu, monkeypatch, tmp_path):
    blocked((8, 128), tpu_target="v5e")(X)
    check.clear_cache()  # a new process, as far as the in-process cache goes
    blocked((8, 128), tpu_target="v5e")(X)
    assert (check.stats.compiles, check.stats.disk_hits) == (0, 1)
    monkeypatch.setenv(disk_cache.ENV_DIR, "off")
    check.clear_cache()
    blocked((8, 128), tpu_target="v5e")(X)
    assert (check.stats.compiles, check.stats.disk_hits) == (1, 0)


def test_corrupt_entry_is_compiled_again_and_rewritten(libtpu):
    with pytest.raises(mosaic_rt.TpuCompileError) as first:
        blocked((4, 128), tpu_target="v5e")(X)
    (path,) = _entries(disk_cache.directory())
    good = json.loads(path.read_text())
    for damaged in (
        "{trunc",
        json.dumps({**good, "outcome": {**good["outcome"], "ok": "yes"}}),
        json.dumps({**good, "outcome": {**good["outcome"], "message": None}}),
    ):
        path.write_text(damaged)
        check.clear_cache()
        with pytest.raises(mosaic_rt.TpuCompileError) as again:
            blocked((4, 128), tpu_target="v5e")(X)
        assert (check.stats.compiles, check.stats.disk_hits) == (1, 0)
        assert str(again.value) == str(first.value)
        rewritten = json.loads(path.read_text())["outcome"]
        assert rewritten["ok"] is False and rewritten["message"] == good["outcome"]["message"]
    check.clear_cache()
    with pytest.raises(mosaic_rt.TpuCompileError) as cached:
        blocked((4, 128), tpu_target="v5e")(X)
    assert check.stats.disk_hits == 1 and str(cached.value) == str(first.value)


# ------------------------------------------------------------------ overlap


def test_overlapped_check_raises_the_same_error(libtpu, monkeypatch):
    monkeypatch.setenv(disk_cache.ENV_DIR, "off")
    with pytest.raises(mosaic_rt.TpuCompileError) as serial:
        blocked((4, 128), tpu_target=("v6e", "v5e"))(X)
    check.clear_cache()
    monkeypatch.setenv(check.ENV_OVERLAP, "1")
    assert check.overlap_enabled()
    with pytest.raises(mosaic_rt.TpuCompileError) as overlapped:
        blocked((4, 128), tpu_target=("v6e", "v5e"))(X)
    assert type(overlapped.value) is type(serial.value)
    assert str(overlapped.value) == str(serial.value)
    assert type(overlapped.value.compiler_error) is type(serial.value.compiler_error)
    assert overlapped.value.generation == "v6e"
    assert check.stats.compiles == 1  # v5e is not compiled after v6e failed
    # A passing kernel passes, overlapped, and gives its result.
    np.testing.assert_array_equal(np.asarray(blocked((8, 128), tpu_target="v5e")(X)), X + 1)
    assert check.stats.failures == 1


def test_overlapped_check_warns_in_the_callers_context(libtpu, monkeypatch):
    monkeypatch.setenv(disk_cache.ENV_DIR, "off")
    messages = {}
    for overlap in ("0", "1"):
        monkeypatch.setenv(check.ENV_OVERLAP, overlap)
        check.clear_cache()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = blocked((4, 128), tpu_target=("v5e", "v6e"), tpu_check="warn")(X)
        np.testing.assert_array_equal(np.asarray(out), X + 1)
        found = [w for w in caught if issubclass(w.category, mosaic_rt.TpuCompileWarning)]
        messages[overlap] = [(str(w.message), w.filename) for w in found]
        assert check.stats.compiles == 2  # warn mode checks every generation
    assert len(messages["1"]) == 2 and messages["1"] == messages["0"]


def test_overlapped_check_answers_from_the_caches(libtpu, monkeypatch):
    blocked((8, 128), tpu_target="v5e")(X)
    check.clear_cache()
    monkeypatch.setenv(check.ENV_OVERLAP, "1")
    blocked((8, 128), tpu_target="v5e")(X)
    blocked((8, 128), tpu_target="v5e")(X)
    assert (check.stats.compiles, check.stats.disk_hits, check.stats.hits) == (0, 1, 1)


# ------------------------------------------------------------------ report


def test_report_rows(libtpu):
    from mosaic_rt import tpu_check

    blocked((8, 128), tpu_target="v5e")(X)
    with pytest.raises(mosaic_rt.TpuCompileError):
        blocked((4, 128), tpu_target="v5e")(X)
    ok, bad = tpu_check.report()
    assert ok["kernel"] == "add_one" and "test_tpu_check_cost.py" in ok["source"]
    assert ok["generation"] == "v5e" and ok["ok"] and not ok["cached"] and ok["seconds"] > 0
    assert ok["memory"]["argument_size_in_bytes"] == 16 * 128 * 4
    assert all(isinstance(v, int) for v in ok["memory"].values())
    assert ok["stage"] is None and ok["message"] is None
    assert not bad["ok"] and bad["stage"] == "lowering" and bad["error_type"] == "ValueError"
    assert "divisible by 8 and 128" in bad["message"] and bad["memory"] is None


# ------------------------------------------------------------------ bench row


def _fake_run(mode: str, scale: float) -> dict:
    compiles = {"off": 0, "warm": 0}.get(mode, 2)
    kernels = [
        {
            "name": n,
            "first_call_s": scale * t,
            "first_call_cpu_s": scale * t / 2,
            "check_compile_s": 0.0 if mode in ("off", "warm") else 0.1,
        }
        for n, t in (("a", 0.5), ("b", 0.1))
    ]
    return {
        "kernels": kernels,
        "compiles": compiles,
        "disk_hits": 2 if mode == "warm" else 0,
        "failures": 0,
        "libtpu_start_s": 0.1,
        "libtpu_started": compiles > 0,
        "process_s": 3 * scale,
        "first_calls_s": 0.6 * scale,
        "first_calls_cpu_s": 0.3 * scale,
    }


def test_bench_row_tables():
    from mosaic_rt.bench import rows, tpu_check
    from mosaic_rt.bench.console import make_console
    from mosaic_rt.bench.row_tpu_check import ROW as row

    assert [r.key for r in rows.select(["tpu check"])] == ["tpu_check"]
    scales = {"off": 1.0, "cold": 2.0, "warm": 1.1, "overlap": 1.9}
    d = tpu_check.summarize({m: [_fake_run(m, s)] * 3 for m, s in scales.items()}, reps=3)
    assert d["ok"] and d["cold_over_off"] == pytest.approx(2.0)
    assert d["kernels"][0]["check_compile_s"] == pytest.approx(0.1)
    assert d["overlap_over_cold"] == pytest.approx(0.95)
    text = "\n".join(row.markdown(d))
    assert "| check, warm disk cache | 660.00 ms | 1.1x |" in text
    assert "| a | 500.00 ms | 1.00 s | 550.00 ms | 950.00 ms | 100.00 ms |" in text
    assert "warm disk cache 660.00 ms" in row.summary(d)
    row.render(make_console(), d)
    compiled_again = {m: [_fake_run(m, s)] for m, s in scales.items()}
    compiled_again["warm"][0] = {**compiled_again["warm"][0], "compiles": 2, "disk_hits": 0}
    assert not tpu_check.summarize(compiled_again, reps=1)["ok"]


def test_bench_row_without_libtpu(monkeypatch):
    from mosaic_rt.bench import measure, tpu_check
    from mosaic_rt.bench.row_tpu_check import ROW as row

    monkeypatch.setattr(tpu_check, "_has_libtpu", lambda: False)
    d = row.run(measure.QUICK)
    assert d["ok"] and d["skipped"].startswith("libtpu not installed (pip install")
    assert "skipped, libtpu not installed" in row.summary(d)
    assert "skipped" in row.markdown(d)[-1]
