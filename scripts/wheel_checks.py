"""Checks on an installed mosaic_rt wheel, run by scripts/test_wheel.sh with the
venv's interpreter from a directory outside the checkout.

    python wheel_checks.py metadata ROOT      version, license, extension module
    python wheel_checks.py readme ROOT N      run README.md's N-th python example
    python wheel_checks.py count ROOT         how many python examples README.md has
"""

import pathlib
import sys
import tomllib


def _examples(root: pathlib.Path) -> list[str]:
    readme = (root / "README.md").read_text()
    return [block.split("```", 1)[0] for block in readme.split("```python\n")[1:]]


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


def readme(root: pathlib.Path, n: int) -> None:
    exec(compile(_examples(root)[n], f"README.md example {n + 1}", "exec"), {})


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("metadata", "readme", "count"):
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1])
    if argv[0] == "metadata":
        metadata(root)
    elif argv[0] == "count":
        print(len(_examples(root)))
    else:
        readme(root, int(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
