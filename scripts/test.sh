#!/usr/bin/env bash
# Every test of mosaic_rt, from a fresh clone (CI runs exactly this command):
#   1. Rust, once: cargo test --workspace, rustfmt + clippy, the loom model tests;
#      the Python lint, once: ruff check + ruff format --check (pyproject.toml [tool.ruff]);
#   2. scripts/test_wheel.sh: the release wheel and sdist, installed into fresh
#      venvs (.venv-test/) on Python 3.11 + jax 0.10.2, 3.12 and 3.13 + the
#      newest jax pip offers (resolved now, printed below: never a pin), with
#      no Rust on PATH; the README's and docs/' python examples and the ping bench;
#   3. pytest on both ends of the jax range, in the 3.11 and 3.12 venvs of 2
#      with the test and tpu extras added (tpu: libtpu for the TPU compile
#      check's tests): every test, those marked slow too (production
#      kernels, the TPU-check sweep, 64-device loads, ...), nothing deselected;
#      then the mpirun tests (-m mpi: tests/distributed's real 2- and 4-process
#      launches, docs/' mpirun example) in the 3.11 venv with the mpi extra
#      (mpi4py + Open MPI from PyPI);
#   4. scripts/client_suite.py --quick: a subset of a third-party suite
#      (tpu-inference's kernel tests, jax 0.11.2) forced into TPU interpret
#      mode, stock vs the wheel of 2, in a venv of its own (.venv-test/client).
# Extra arguments go to pytest.
#
# scripts/test.sh --here [PYTEST ARGS]: quick development run (cargo, ruff,
# loom, pytest) in the current environment; needs `pip install -e ".[test]"` first.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
source scripts/_common.sh
target="${CARGO_TARGET_DIR:-target}"
summary=() failed=0

phase() {  # phase NAME COMMAND...: runs, times, records the result
    local name="$1"; shift
    local t0=$SECONDS status
    echo; echo "== $name"
    "$@"; status=$?
    if [ $status -eq 0 ]; then
        summary+=("ok      $((SECONDS - t0))s  $name")
    else
        summary+=("FAILED  $((SECONDS - t0))s  $name (exit $status)")
        failed=1
    fi
    return $status
}

rust_tests() {
    command -v cargo > /dev/null \
        || { echo "error: cargo not found: install a stable Rust toolchain (rustup)" >&2; return 1; }
    cargo test --workspace
}

rust_style() {
    # Formatting (rustfmt.toml) and lints, clippy's unsafe-block rule included.
    if ! cargo fmt --version > /dev/null 2>&1 || ! cargo clippy --version > /dev/null 2>&1; then
        echo "skipped: rustfmt / clippy not installed (rustup component add rustfmt clippy)"; return 0
    fi
    cargo fmt --all --check && cargo clippy --workspace --all-targets -- -D warnings
}

python_lint() {
    # ruff in a venv of its own (.venv-test/lint), the way the wheel build
    # gets maturin: pinned to a minor release, whose rules do not move.
    local venv="$root/.venv-test/lint" py
    if [ ! -x "$venv/bin/python" ]; then
        py="$(find_python 3.11)" || return 1
        "$py" -m venv "$venv" || return 1
    fi
    "$venv/bin/python" -m pip install --quiet "ruff>=0.17,<0.18" || return 1
    "$venv/bin/ruff" --version && "$venv/bin/ruff" check . && "$venv/bin/ruff" format --check .
}

loom_tests() {
    # Loom models run with --cfg loom, which rebuilds every crate: keep those
    # artifacts apart so the two builds do not invalidate each other.
    if ! compgen -G "rust/core/tests/loom_*.rs" > /dev/null; then
        echo "none yet (rust/core/tests/loom_*.rs)"; return 0
    fi
    RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$target/loom" \
        cargo test -p mosaic_rt_core --release --test 'loom_*'
}

pytest_in() {  # pytest_in PY [PYTEST ARGS]: the wheel's venv plus test extras
    local venv="$root/.venv-test/py$1"; shift
    local wheel
    wheel="$(ls "$root"/.venv-test/dist/mosaic_rt-*.whl 2>/dev/null)"
    [ -x "$venv/bin/python" ] && [ -n "$wheel" ] \
        || { echo "error: no wheel venv at $venv (its wheel test step failed)" >&2; return 1; }
    # The tpu extra: libtpu, the newest on PyPI (~210 MB wheel), which
    # tests/tpu_check needs in CI (the TPU compile check).
    "$venv/bin/python" -m pip install --quiet --only-binary=:all: "$wheel[test,tpu]" || return 1
    "$venv/bin/python" -c 'import jax, numpy; from importlib import metadata as m; print("jax", jax.__version__, "jaxlib", m.version("jaxlib"), "numpy", numpy.__version__, "libtpu", m.version("libtpu"))'
    # JAX_PLATFORMS for every test process, subprocesses included: with
    # libtpu installed, jax would otherwise try to start a TPU backend.
    JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}" "$venv/bin/python" -m pytest -q "$@"
}

pytest_mpi() {  # the mpirun tests (-m mpi) in the 3.11 wheel venv, MPI from PyPI
    local venv="$root/.venv-test/py3.11" wheel
    wheel="$(ls "$root"/.venv-test/dist/mosaic_rt-*.whl 2>/dev/null)"
    [ -x "$venv/bin/python" ] && [ -n "$wheel" ] \
        || { echo "error: no wheel venv at $venv (its wheel test step failed)" >&2; return 1; }
    # The mpi extra: mpi4py and Open MPI (mpirun lands in the venv's bin).
    "$venv/bin/python" -m pip install --quiet --only-binary=:all: "$wheel[test,mpi]" || return 1
    # shellcheck disable=SC2046  # one word per file
    PATH="$venv/bin:$PATH" JAX_PLATFORMS=cpu "$venv/bin/python" -m pytest -q -m mpi $(mpi_test_files) "$@"
}

mpi_test_files() {  # the files of mpi-marked tests (docs/' mpirun example too): the phase deselects nothing
    grep -l "pytest.mark.mpi" tests/*/test_*.py
}

client_suite_quick() {
    local wheel py
    wheel="$(ls "$root"/.venv-test/dist/mosaic_rt-*.whl 2>/dev/null)"
    [ -n "$wheel" ] || { echo "error: no wheel in .venv-test/dist (its wheel test step failed)" >&2; return 1; }
    py="$(find_python 3.12)" || return 1
    "$py" scripts/client_suite.py --quick --no-torch --venv "$root/.venv-test/client" \
        --mosaic-rt-wheel "$wheel" --json "$root/.venv-test/client-quick.json"
}

if [ "${1:-}" = "--here" ]; then
    shift
    phase "cargo test --workspace" rust_tests
    phase "rustfmt + clippy" rust_style
    phase "ruff check + format" python_lint
    phase "loom model tests" loom_tests
    phase "pytest ($(python --version 2>&1))" python -m pytest -q "$@"
    if python -c "import mpi4py" 2> /dev/null; then
        # shellcheck disable=SC2046  # one word per file
        phase "pytest -m mpi: mpirun launches" python -m pytest -q -m mpi $(mpi_test_files)
    fi
else
    # The upper end of the jax range: the newest release on PyPI, asked once
    # here (newest_jax exports it to the scripts below). A jax newer than
    # the one mosaic_rt declares tested is tested all the same: if it breaks
    # us, this run fails and the log says which jax it used.
    for py in 3.12 3.13; do newest_jax "$py" > /dev/null || exit 1; done
    jax_hi="$(default_jax 3.12)"
    tested_hi="$(sed -n 's/^TESTED_NEWEST = (\([0-9, ]*\)).*/\1/p' python/mosaic_rt/jax_version.py | tr -d ' ' | tr , .)"
    echo "== jax range under test: 0.10.2 (Python 3.11) .. $jax_hi (Python 3.12 / 3.13: the newest on PyPI today;" \
        "$(default_jax 3.13) for 3.13); mosaic_rt declares $tested_hi tested"
    phase "cargo test --workspace" rust_tests
    phase "rustfmt + clippy" rust_style
    phase "ruff check + format" python_lint
    phase "loom model tests" loom_tests
    phase "wheel: build, install beside jax, smoke test (3.11, 3.12, 3.13)" bash scripts/test_wheel.sh
    # Every test, the slow ones included (pyproject's addopts deselects
    # them for the developer loop and --here; a later -m wins): nothing is
    # deselected. The slow ones add little enough per end that both ends
    # fit CI's 90 min (benches/PERFORMANCE.md, "Bench harness and test runs").
    phase "pytest (every test): Python 3.11 + jax 0.10.2" pytest_in 3.11 -m "slow or not slow" "$@"
    # Real multi-process launches under mpirun (2 and 4 ranks), MPI from PyPI.
    phase "pytest -m mpi: mpirun launches, Python 3.11 + jax 0.10.2" pytest_mpi
    # Only the newest jax here: 0.12.0.1 differs from 0.12.1 for us in one
    # attribute (BlockMapping.transformed_block_aval, unit-tested both ways),
    # and CI's time goes further on the newest release users get.
    phase "pytest (every test): Python 3.12 + jax $jax_hi" pytest_in 3.12 -m "slow or not slow" "$@"
    phase "client suite, quick subset: tpu-inference 0.32.0 + jax 0.11.2, stock vs ours" client_suite_quick
fi

echo; echo "== summary"
printf '%s\n' "${summary[@]}"
exit $failed
