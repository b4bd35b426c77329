"""The installed distribution's version: the Cargo workspace version, which
maturin writes into the package metadata (the one version source)."""

from importlib import metadata

try:
    __version__ = metadata.version("mosaic_rt")
except metadata.PackageNotFoundError:  # imported from a source tree never installed
    __version__ = "0+unknown"
