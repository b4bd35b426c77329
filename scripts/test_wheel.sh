#!/usr/bin/env bash
# Builds the release wheel and sdist, then installs the wheel into a fresh venv
# per Python that already holds a supported jax, with no Rust toolchain on
# PATH, and checks: pip leaves the installed packages as they were (it only
# adds mosaic_rt), version/LICENSE metadata, the python examples of README.md
# and docs/*.md, and `python -m mosaic_rt bench --quick --filter ping`.
#
#   scripts/test_wheel.sh [--wheel PATH] [--venvs DIR] [PY[:JAX] ...]
#
# PY defaults to 3.11 3.12 3.13; JAX to 0.10.2 on 3.11, otherwise the newest
# jax pip offers for that Python (scripts/_common.sh: default_jax).
# --wheel skips the build. The venvs stay in DIR (default .venv-test/) as
# DIR/pyPY, so scripts/test.sh can run pytest in them afterwards.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
source scripts/_common.sh

wheel="" venvs=".venv-test" targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --wheel) wheel="${2:?--wheel needs a path}"; shift 2 ;;
        --venvs) venvs="${2:?--venvs needs a directory}"; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0" | cut -c3-; exit 0 ;;
        -*) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=(3.11 3.12 3.13)
mkdir -p "$venvs" && venvs="$(cd "$venvs" && pwd)"
failed=()

step() {  # step NAME COMMAND...: runs, reports, remembers failures
    local name="$1"; shift
    local t0=$SECONDS
    echo "-- $name"
    if "$@"; then
        echo "   ok: $name ($((SECONDS - t0)) s)"
    else
        echo "   FAILED: $name ($((SECONDS - t0)) s)"
        failed+=("$name")
        return 1
    fi
}

build() {
    local dist="$venvs/dist" bvenv="$venvs/build" py
    rm -rf "$dist" && mkdir -p "$dist"
    if [ ! -x "$bvenv/bin/maturin" ]; then
        py="$(find_python 3.11)" || return 1
        "$py" -m venv "$bvenv" && "$bvenv/bin/pip" install --quiet "maturin>=1.9.4,<2" || return 1
    fi
    command -v cargo > /dev/null || { echo "error: cargo not on PATH (building needs Rust)" >&2; return 1; }
    "$bvenv/bin/maturin" build --release --out "$dist" && "$bvenv/bin/maturin" sdist --out "$dist" || return 1
    ls -l "$dist"
}

check_build() {  # one abi3 manylinux wheel; sdist holds the sources and LICENSE
    local dist="$venvs/dist" wheels sdists
    wheels=("$dist"/mosaic_rt-*.whl) sdists=("$dist"/mosaic_rt-*.tar.gz)
    [ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] || { echo "expected one wheel in $dist" >&2; return 1; }
    [[ "$(basename "${wheels[0]}")" =~ -cp311-abi3-manylinux_2_[0-9]+_x86_64\.whl$ ]] \
        || { echo "wheel tag is not cp311-abi3-manylinux: ${wheels[0]}" >&2; return 1; }
    "$venvs/build/bin/python" - "${wheels[0]}" "${sdists[0]}" <<'EOF'
import sys, tarfile, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for want in ("licenses/LICENSE", "mosaic_rt/_native.abi3.so", "mosaic_rt/__init__.py"):
    assert any(n.endswith(want) for n in names), f"{want} missing from the wheel"
names = tarfile.open(sys.argv[2]).getnames()
for want in ("/LICENSE", "/Cargo.lock", "/pyproject.toml", "/rust/wire/src/lib.rs", "/rust/programs/src/lib.rs",
             "/rust/core/src/lib.rs", "/rust/python/src/lib.rs", "/python/mosaic_rt/__init__.py"):
    assert any(n.endswith(want) for n in names), f"{want} missing from the sdist"
print("wheel and sdist contents ok")
EOF
}

make_venv() {  # make_venv PYTHON DIR "REQUIREMENTS"
    # shellcheck disable=SC2086  # $3 is a list of requirement words
    "$1" -m venv "$2" && "$2/bin/python" -m pip install --quiet --only-binary=:all: $3
}

freeze() { "$1/bin/python" -m pip list --format=freeze 2>/dev/null | sort; }

install_beside_jax() {  # install_beside_jax VENV: pip may add mosaic_rt only
    local venv="$1" before after added
    before="$(freeze "$venv")"
    PATH="$(path_without_rust)" "$venv/bin/python" -m pip install --only-binary=:all: \
        "$wheel" > "$venv/install.log" 2>&1 || { cat "$venv/install.log"; return 1; }
    grep -E "^Successfully installed" "$venv/install.log"
    after="$(freeze "$venv")"
    added="$(comm -13 <(echo "$before") <(echo "$after"))"
    if [ -n "$(comm -23 <(echo "$before") <(echo "$after"))" ] \
            || [ "$(echo "$added" | wc -l)" != 1 ] || [[ "$added" != mosaic_rt==* ]]; then
        echo "pip changed the environment; before vs after:" >&2
        diff <(echo "$before") <(echo "$after") >&2
        return 1
    fi
    echo "$before" | grep -E "^(jax|jaxlib|numpy|ml.dtypes)==" | tr '\n' ' '; echo "(unchanged)"
}

in_venv() {  # in_venv VENV CMD...: no Rust on PATH, cwd outside the checkout
    local venv="$1"; shift
    (cd "$venv" && PATH="$venv/bin:$(path_without_rust)" VIRTUAL_ENV="$venv" timeout 1200 "$@")
}

smoke() {  # smoke PY JAX
    local py="$1" jax="$2" exe venv="$venvs/py$1" n i
    echo "== Python $py + jax $jax: fresh venv $venv"
    exe="$(find_python "$py")" || { failed+=("python $py missing"); return; }
    rm -rf "$venv"
    step "[$py] venv with $(jax_stack "$jax")" make_venv "$exe" "$venv" "$(jax_stack "$jax")" || return
    step "[$py] pip install wheel keeps jax/numpy" install_beside_jax "$venv" || return
    step "[$py] version and license metadata" in_venv "$venv" python "$root/scripts/wheel_checks.py" metadata "$root"
    n="$(in_venv "$venv" python "$root/scripts/wheel_checks.py" count "$root")" || n=0
    for ((i = 0; i < n; i++)); do
        step "[$py] docs python example $((i + 1))/$n (README.md, docs/)" \
            in_venv "$venv" python "$root/scripts/wheel_checks.py" example "$root" "$i"
    done
    step "[$py] python -m mosaic_rt bench --quick --filter ping" \
        in_venv "$venv" python -m mosaic_rt bench --quick --filter ping
}

if [ -z "$wheel" ]; then
    step "build wheel and sdist (maturin build --release; maturin sdist)" build || exit 1
    step "wheel tag and contents" check_build || exit 1
    wheel="$(ls "$venvs"/dist/mosaic_rt-*.whl)"
fi
[ -f "$wheel" ] || { echo "error: no wheel at $wheel" >&2; exit 2; }
wheel="$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")"
echo "wheel: $wheel ($(du -k "$wheel" | cut -f1) KiB)"
for target in "${targets[@]}"; do
    py="${target%%:*}"
    if [[ "$target" == *:* ]]; then jax="${target#*:}"; else jax="$(default_jax "$py")" || { failed+=("jax for $py"); continue; }; fi
    smoke "$py" "$jax"
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "wheel tests: ${#failed[@]} step(s) FAILED:"; printf '  %s\n' "${failed[@]}"
    exit 1
fi
echo "wheel tests: all steps passed (${targets[*]})"
