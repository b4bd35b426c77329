#!/usr/bin/env bash
# Runs every test of mosaic_rt: the Rust workspace tests, the loom model tests
# of the core, and pytest. Expects the package installed with its test extras
# (`pip install ".[test]"`, or `-e` for development). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"

echo "== cargo test (workspace)"
cargo test --workspace

# Loom models run with --cfg loom, which rebuilds every crate: keep those
# artifacts apart so the two builds do not invalidate each other.
if compgen -G "rust/core/tests/loom_*.rs" > /dev/null; then
    echo "== loom model tests"
    RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$target/loom" \
        cargo test -p mosaic_rt_core --release --test 'loom_*'
else
    echo "== loom model tests: none yet (rust/core/tests/loom_*.rs)"
fi

echo "== pytest"
python -m pytest -q "$@"
