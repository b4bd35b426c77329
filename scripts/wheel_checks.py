"""Checks on an installed mosaic_rt wheel, run by scripts/test_wheel.sh with the
venv's interpreter from a directory outside the checkout.

    python wheel_checks.py metadata ROOT      version, license, extension module
    python wheel_checks.py example ROOT N     run the N-th python example of README.md and docs/*.md
    python wheel_checks.py count ROOT         how many python examples they have

An example that needs an optional extra the venv lacks is skipped, saying
which (scripts/doc_blocks.py: the blocks and their directions).
"""

import pathlib
import sys
import tempfile
import tomllib

import doc_blocks  # beside this script


def metadata(root: pathlib.Path) -> None:
    from importlib import metadata as md

    import mosaic_rt
    from mosaic_rt import _native

    cargo = tomllib.loads((root / "Cargo.toml").read_text())["workspace"]["package"]["version"]
    installed = md.version("mosaic_rt")
    assert cargo == installed == mosaic_rt.__version__, (cargo, installed, mosaic_rt.__version__)
    dist = md.distribution("mosaic_rt")
    licenses = [f for f in dist.files if f.name == "LICENSE"]
    assert licenses, "LICENSE is not in the installed wheel"
    assert "Apache License" in licenses[0].read_text()
    assert dist.metadata["License-Expression"] == "Apache-2.0", dist.metadata["License-Expression"]
    so = pathlib.Path(_native.__file__).name
    assert ".abi3." in so, so
    site = pathlib.Path(mosaic_rt.__file__).resolve()
    assert "site-packages" in site.parts, f"not imported from the installed wheel: {site}"
    print(f"mosaic_rt {installed} (Cargo {cargo}) from {site.parent}; {so}; LICENSE shipped")


def example(root: pathlib.Path, n: int) -> int:
    block = doc_blocks.python_blocks(root)[n]
    why = doc_blocks.missing(block)
    if why:
        print(f"skipped: {why}")
        return 0
    with tempfile.TemporaryDirectory(prefix="mosaic_rt_doc_") as tmp:
        done = doc_blocks.run(block, pathlib.Path(tmp))
    print(f"{block.where}: exit {done.returncode}")
    print(done.stdout[-4000:], done.stderr[-8000:], sep="\n", end="")
    return done.returncode


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("metadata", "example", "count"):
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1])
    if argv[0] == "metadata":
        metadata(root)
    elif argv[0] == "count":
        print(len(doc_blocks.python_blocks(root)))
    else:
        return example(root, int(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
