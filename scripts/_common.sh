# Sourced by the test scripts: locating interpreters and the pinned stacks.

# The jax each tested Python gets: both ends of the supported range. 3.11
# has only jax 0.10.2 (the lowest supported: jax >= 0.11 needs Python
# >= 3.12); the others get the newest jax release pip offers for them,
# resolved when the tests run, never a pin (a new jax is tested the day it
# ships). MOSAIC_RT_TEST_JAX=VERSION overrides the upper end.
default_jax() {
    case "$1" in
        3.11) echo 0.10.2 ;;
        *) if [ -n "${MOSAIC_RT_TEST_JAX:-}" ]; then echo "$MOSAIC_RT_TEST_JAX"; else newest_jax "$1"; fi ;;
    esac
}

# newest_jax PY: the newest jax release (no pre-releases) pip would install
# for Python PY, asked of PyPI once per run (remembered in the environment,
# which the scripts this one runs inherit).
newest_jax() {
    local var="MOSAIC_RT_NEWEST_JAX_${1//./_}" py version
    if [ -n "${!var:-}" ]; then echo "${!var}"; return 0; fi
    py="$(find_python "$1")" || return 1
    version="$("$py" -m pip install --dry-run --ignore-installed --no-deps --quiet --report - jax 2> /dev/null \
        | "$py" -c 'import json, sys; print(json.load(sys.stdin)["install"][0]["metadata"]["version"])' 2> /dev/null)"
    if [ -z "$version" ]; then
        echo "error: could not ask pip for the newest jax for Python $1 (is PyPI reachable?);" \
             "set MOSAIC_RT_TEST_JAX=VERSION to test a given jax" >&2
        return 1
    fi
    export "$var=$version"
    echo "$version"
}

# Packages pinned next to that jax: jax's own requirement pins the matching
# jaxlib. jaxlib 0.10.2 breaks with numpy 2.4.
jax_stack() {
    local jax="$1"
    local stack="jax==$jax"
    case "$jax" in 0.10.*) stack="$stack numpy<2.4" ;; esac
    echo "$stack"
}

# Prints the path of a working `pythonX.Y`: a pyenv install first (CI machines
# keep 3.12 and 3.13 there, not on PATH), then PATH. Exits with a clear message
# when there is none.
find_python() {
    local want="$1" root full exe
    if command -v pyenv > /dev/null 2>&1; then
        root="$(pyenv root)"
        for full in $(pyenv versions --bare 2>/dev/null | grep -E "^${want//./\\.}(\.[0-9]+)?$" | sort -rV); do
            exe="$root/versions/$full/bin/python$want"
            if [ -x "$exe" ] && "$exe" -c 'import venv' > /dev/null 2>&1; then
                echo "$exe"; return 0
            fi
        done
    fi
    exe="$(command -v "python$want" 2>/dev/null || true)"
    if [ -n "$exe" ] && "$exe" -c 'import venv' > /dev/null 2>&1; then
        echo "$exe"; return 0
    fi
    echo "error: Python $want not found (looked in pyenv versions and for python$want on PATH)." >&2
    echo "       Install it (e.g. 'pyenv install $want') or put python$want on PATH." >&2
    return 1
}

# PATH without any Rust toolchain: the wheel must install and run without one.
path_without_rust() {
    local out="" dir
    local IFS=:
    for dir in $PATH; do
        if [ -x "$dir/cargo" ] || [ -x "$dir/rustc" ]; then continue; fi
        out="${out:+$out:}$dir"
    done
    echo "$out"
}
