"""Which jax releases mosaic_rt works with, and what it says about the others.

Supported: jax 0.10.2 and newer. Releases up to `TESTED_NEWEST` are tested
(the README's test command also installs the newest jax on PyPI, so a new
release is tried the day it ships). There is no upper pin at install time:
a pin would make ``pip install mosaic_rt`` downgrade a newer jax the user
already has. Instead:

* an older jax fails at import with one clear ImportError;
* a newer jax imports with one `UntestedJaxWarning` naming both versions;
* a JAX internal that moved (what `mosaic_rt.jax_internals` imports, or an
  attribute of a jax object the interpreter reads) raises `JaxVersionError`
  naming the jax version and the tested range, at import or where a kernel
  first reaches it -- not an AttributeError deep inside a kernel.

Imports no JAX internals itself (it must work when they moved).
"""

from __future__ import annotations

import contextlib
import re
import sys
import warnings

from mosaic_rt.errors import JaxVersionError, UntestedJaxWarning

LOWEST_SUPPORTED = (0, 10, 2)
# The newest jax release the README's test command ran green on. Raise it
# when the test command, which installs the newest jax on PyPI, passes on a
# newer one.
TESTED_NEWEST = (0, 12, 1)

_PACKAGE = __name__.rpartition(".")[0]


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string ("0.12.0.1" -> (0, 12, 0, 1))."""
    parts = []
    for piece in version.split("."):
        m = re.match(r"\d+", piece)
        if m is None:
            break
        parts.append(int(m.group()))
        if m.end() != len(piece):  # "1rc1", "0.dev..." end the release part
            break
    return tuple(parts)


def dotted(rel: tuple[int, ...]) -> str:
    return ".".join(map(str, rel))


def tested_range() -> str:
    """The tested jax releases, as messages state them."""
    return f"{dotted(LOWEST_SUPPORTED)} .. {dotted(TESTED_NEWEST)}"


def _install_hint() -> str:
    newest = dotted(TESTED_NEWEST)
    return f"`pip install 'jax=={newest}' 'jaxlib=={newest}'`"


def _mosaic_rt_version() -> str:
    from mosaic_rt._version import __version__

    return __version__


def is_newer_than_tested(version: str) -> bool:
    """Whether ``version`` is past `TESTED_NEWEST` (0.12.2, 0.13.0rc1, 1.0 --
    but not 0.12.1.post1 or 0.12.1rc1)."""
    return release(version)[: len(TESTED_NEWEST)] > TESTED_NEWEST


def check_supported(version: str) -> None:
    """ImportError below the lowest supported jax; one UntestedJaxWarning
    above the newest tested (at import, so once per process)."""
    if release(version) < LOWEST_SUPPORTED:
        raise ImportError(
            f"mosaic_rt supports jax >= {dotted(LOWEST_SUPPORTED)}; found jax {version}."
            f" Install a supported jax (e.g. {_install_hint()})."
        )
    if is_newer_than_tested(version):
        warnings.warn(
            UntestedJaxWarning(
                f"mosaic_rt {_mosaic_rt_version()} was tested with jax {tested_range()}; found jax"
                f" {version}, which is newer. Kernels are expected to run; if mosaic_rt fails with"
                f" this jax, please report it, or install a tested jax ({_install_hint()})."
            ),
            stacklevel=2,
        )


def moved_internal(error: BaseException, jax_version: str) -> JaxVersionError:
    """The error for a JAX internal that is not where mosaic_rt expects it
    (``error``: the ImportError / AttributeError that said so)."""
    return JaxVersionError(
        f"mosaic_rt {_mosaic_rt_version()} cannot use jax {jax_version}: a JAX internal it relies on"
        f" has moved ({type(error).__name__}: {error}). Tested with jax {tested_range()}; install a"
        f" tested jax ({_install_hint()}) or a newer mosaic_rt.",
        jax_version=jax_version,
        tested=tested_range(),
    )


def _is_jax_module(name: str | None) -> bool:
    return bool(name) and (name == "jax" or name.startswith(("jax.", "jaxlib")))


def _raised_in_mosaic_rt(error: BaseException) -> bool:
    """Whether the innermost frame of ``error``'s traceback is our code (a
    lookup mosaic_rt made, not one inside jax or a user's function)."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_globals.get("__name__", "").startswith(_PACKAGE + ".")


def is_moved_internal(error: BaseException) -> bool:
    """An ImportError of a jax module, or an AttributeError that our code
    got from a jax object (a module of jax, or an instance / class defined
    in one)."""
    if isinstance(error, ImportError) and not isinstance(error, JaxVersionError):
        return _is_jax_module(error.name)
    if isinstance(error, AttributeError) and _raised_in_mosaic_rt(error):
        obj = getattr(error, "obj", None)
        if obj is None:
            return False
        owner = obj.__name__ if isinstance(obj, type(sys)) else getattr(type(obj), "__module__", None)
        if isinstance(obj, type):
            owner = obj.__module__
        return _is_jax_module(owner)
    return False


@contextlib.contextmanager
def internals_guard():
    """Turns a moved JAX internal met inside the block into `JaxVersionError`
    (chained to the original error); everything else passes through."""
    try:
        yield
    except (ImportError, AttributeError) as e:
        if not is_moved_internal(e):
            raise
        import jax

        raise moved_internal(e, jax.__version__) from e
