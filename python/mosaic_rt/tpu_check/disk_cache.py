"""The TPU compile check's answers on disk, shared by every process.

One small JSON file per (kernel fingerprint, generation, jax, jaxlib,
libtpu and mosaic_rt versions), so a second test run, or another
pytest-xdist worker, that checks a kernel already checked compiles nothing
and, when every answer is on disk, never starts libtpu.

Where: ``$MOSAIC_RT_TPU_CACHE_DIR``, else ``$XDG_CACHE_HOME/mosaic_rt/
tpu_check``, else ``~/.cache/mosaic_rt/tpu_check``. Setting the variable to
``""``, ``0``, ``off``, ``false`` or ``no`` turns the disk cache off (the
in-process cache stays).

Writes go to a temporary file in the same directory and are renamed over
the entry, so a reader sees a whole entry or none, and two processes writing
the same entry both leave a whole one. An entry that does not parse, or is
not the entry its name says, is ignored (and rewritten by the next compile).
Beyond `MAX_ENTRIES` files the least recently used are deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

ENV_DIR = "MOSAIC_RT_TPU_CACHE_DIR"
OFF = ("", "0", "off", "false", "no", "none")
FORMAT = 1  # bump when an entry's meaning changes
MAX_ENTRIES = 4096  # ~1 KiB each (a failure's message can be a few KiB)
_STALE_TMP_S = 3600.0  # a temporary file this old was left by a killed writer
_SUFFIX = ".json"


def directory() -> Path | None:
    """The cache directory, or None when the disk cache is off."""
    value = os.environ.get(ENV_DIR)
    if value is not None:
        value = value.strip()
        if value.lower() in OFF:
            return None
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mosaic_rt" / "tpu_check"


def _versions() -> dict:
    """What else decides a compile's answer: the compiler and its callers."""
    from importlib import metadata

    import jax

    from mosaic_rt._version import __version__ as mosaic_rt_version

    def version(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    libtpu = version("libtpu")
    override = os.environ.get("TPU_LIBRARY_PATH")
    if override and os.path.isfile(override):  # a libtpu of its own: name it by file
        st = os.stat(override)
        libtpu = f"{override}:{st.st_size}:{int(st.st_mtime)}"
    return {
        "format": FORMAT,
        "jax": jax.__version__,
        "jaxlib": version("jaxlib"),
        "libtpu": libtpu,
        "mosaic_rt": mosaic_rt_version,
    }


_versions_cache: dict | None = None


def versions() -> dict:
    global _versions_cache
    if _versions_cache is None:
        _versions_cache = _versions()
    return _versions_cache


def entry_key(fingerprint: str, generation: str) -> str:
    text = json.dumps([fingerprint, generation, versions()], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _path(root: Path, key: str) -> Path:
    return root / f"{key}{_SUFFIX}"


def load(key: str) -> dict | None:
    """The entry stored under ``key``, or None (absent, off, unreadable,
    corrupt or not this key's)."""
    root = directory()
    if root is None:
        return None
    path = _path(root, key)
    try:
        with open(path, "rb") as f:
            entry = json.loads(f.read())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != key or not isinstance(entry.get("outcome"), dict):
        return None
    try:
        os.utime(path)  # recently used: evicted last
    except OSError:
        pass
    return entry


def store(key: str, entry: dict) -> bool:
    """Writes ``entry`` under ``key`` atomically; False when it could not
    (a read-only or full disk is not the kernel's problem: the check goes on)."""
    root = directory()
    if root is None:
        return False
    data = json.dumps({**entry, "key": key}, sort_keys=True).encode()
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, _path(root, key))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        return False
    _evict(root)
    return True


def _evict(root: Path, limit: int | None = None) -> None:
    """Deletes the least recently used entries beyond ``limit`` (and
    temporary files left by killed writers). Another process may delete
    the same files at the same time: a missing file is fine."""
    limit = MAX_ENTRIES if limit is None else limit
    now = time.time()
    entries = []
    try:
        with os.scandir(root) as it:
            for e in it:
                if not e.name.endswith(_SUFFIX):
                    continue
                try:
                    mtime = e.stat().st_mtime
                except OSError:
                    continue
                if e.name.startswith(".tmp-"):
                    if now - mtime > _STALE_TMP_S:
                        _unlink(e.path)
                    continue
                entries.append((mtime, e.path))
    except OSError:
        return
    if len(entries) <= limit:
        return
    entries.sort()
    # Down to 90% of the cap, so a full cache does not rescan on every write.
    for _, path in entries[: len(entries) - int(limit * 0.9)]:
        _unlink(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def clear() -> None:
    """Deletes every entry of the cache directory (tests, `mosaic_rt` users
    after a libtpu swap that kept its version)."""
    root = directory()
    if root is None or not root.is_dir():
        return
    with os.scandir(root) as it:
        for e in it:
            if e.name.endswith(_SUFFIX):
                _unlink(e.path)
