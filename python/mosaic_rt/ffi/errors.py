"""Native errors back to their Python types.

A failing FFI handler returns the message ``[mosaic_rt#N] <Type>: <text>``
of the launch's ROOT cause; XLA raises it as ``jax.errors.JaxRuntimeError``
(prefixed with ``INVALID_ARGUMENT: ``). Python cannot change the type XLA
raises, so :func:`translate` rebuilds the right exception from the native
error table entry N (exact message, device, core).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import re
import threading

from jax.errors import JaxRuntimeError

from mosaic_rt import _native, jax_internals
from mosaic_rt.errors import _from_native

_MARKER = re.compile(r"\[mosaic_rt#(\d+)\] (\w+): (.*)", re.S)
# The wire text ends with the failing op's line when known
# (rust/ffi/src/errors.rs `wire_message`); the message proper is before it.
_SITE_NOTE = "\n(raised by the kernel op at "


def _build(type_name: str, message: str, device, core, site: str | None) -> BaseException:
    exc = _from_native(type_name, message, device, core, None)
    # The message stays the one stock raises; where it happened is a note
    # (shown under the message in tracebacks).
    exc.site = site
    if site is not None:
        exc.add_note(f"raised by the kernel op at {site}")
    return exc


# Exceptions raised by user code inside kernels (host callbacks), kept so the
# native root cause can be re-raised as the ORIGINAL object. Bounded: the
# oldest are forgotten (their errors then come back as MosaicRuntimeError
# with the same type name and message).
_EXCEPTIONS_KEPT = 256
_exceptions: collections.OrderedDict[int, BaseException] = collections.OrderedDict()
_exceptions_lock = threading.Lock()
_keys = itertools.count(1)


def register_exception(exc: BaseException) -> int:
    """Keeps ``exc`` and returns its key for ``_native.fail_launch``."""
    with _exceptions_lock:
        key = next(_keys)
        _exceptions[key] = exc
        while len(_exceptions) > _EXCEPTIONS_KEPT:
            _exceptions.popitem(last=False)
        return key


def registered_exception(key: int) -> BaseException | None:
    with _exceptions_lock:
        return _exceptions.get(key)


def fail_launch(handle: int, device: int, core: int, exc: BaseException) -> str | None:
    """Fails launch ``handle`` with ``exc`` (raised on (device, core) outside
    mosaic_rt's ops, e.g. in a user host callback) as its root cause and
    wakes every waiter; ``translate`` then re-raises ``exc`` itself.
    Returns the launch's root cause as the ``[mosaic_rt#N] ...`` text the
    native ops fail with (raise it from the failing callback too, so that
    whichever device XLA reports, the user gets the root cause), or None if
    the launch has ended."""
    key = register_exception(exc)
    return _native.fail_launch(int(handle), int(device), int(core), key, type(exc).__name__, str(exc))


def translate(exc: BaseException) -> BaseException:
    """The Python exception a native mosaic_rt error stands for.

    ``exc`` itself is returned unless it is a ``JaxRuntimeError`` carrying
    our marker; otherwise the result has the root cause's type (e.g.
    ``ValueError``) and exact message, ``device`` / ``core`` attributes, and
    ``__cause__`` set to ``exc``.
    """
    # XLA errors arrive as JaxRuntimeError; jax 0.12 re-raises an error from
    # inside a host callback (the several-cores launcher) as ValueError.
    if not isinstance(exc, (JaxRuntimeError, ValueError)):
        return exc
    m = _MARKER.search(str(exc))
    if m is None:
        return exc
    record = _native.take_error_ex(int(m.group(1)))
    if record is None:
        # Dropped from the bounded table: the text still has type and message.
        message, _, site = m.group(3).partition(_SITE_NOTE)
        type_name, device, core, key, site = m.group(2), None, None, None, site.rsplit(")", 1)[0] or None
    else:
        type_name, message, device, core, key, site = record
    if key is not None:
        original = registered_exception(key)
        if original is not None:
            return original
    new = _build(type_name, message, device, core, site)
    new.__cause__ = exc
    return new


def _forget_failed_runtime_tokens() -> None:
    """Drops jax's per-device runtime tokens that hold one of our errors.

    jax keeps the token of the last side-effecting execution per device and
    blocks on it at exit, which would print an error that was already raised
    and handled. Only tokens failing with our marker are dropped.
    """
    try:
        tokens = jax_internals.output_runtime_tokens()
    except (ImportError, AttributeError):  # jax internals moved: keep the noise
        return
    for device, token in list(tokens.items()):
        try:
            token.block_until_ready()
        except (JaxRuntimeError, ValueError) as e:
            if _MARKER.search(str(e)):
                tokens.pop(device, None)


class native_errors(contextlib.ContextDecorator):
    """Context manager / decorator re-raising native errors as their types.

    Other exceptions pass through untouched. jax dispatches asynchronously:
    block on the results (``block_until_ready``, ``np.asarray``) inside the
    block so that errors surface there.
    """

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if exc is None:
            return False
        new = translate(exc)
        if new is exc:
            return False
        _forget_failed_runtime_tokens()
        raise new.with_traceback(tb) from exc
