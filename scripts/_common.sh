# Sourced by the test scripts: locating interpreters and the pinned stacks.

# The jax that each tested Python gets (both ends of the supported range:
# jax >= 0.11 needs Python >= 3.12; 0.10.2 is the only one on 3.11).
default_jax() {
    case "$1" in
        3.11) echo 0.10.2 ;;
        *) echo 0.12.0.1 ;;
    esac
}

# Packages pinned next to that jax. jaxlib 0.10.2 breaks with numpy 2.4.
jax_stack() {
    local jax="$1"
    local stack="jax==$jax jaxlib==$jax"
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
