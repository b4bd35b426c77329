"""Fingerprints of the programs mosaic_rt emits for every kernel of the
corpora: a restructuring that should change nothing can prove it did not.

    python benches/tools/emitted_programs.py [--save FILE | --check FILE] [--only TEXT]

Lowers, without compiling or running, every kernel of the bench's zoo, of
the production-kernel family and of the test corpora (tests/support/kernels) under
mosaic_rt interpret mode, and prints one line per kernel: a short sha256 of
its lowered StableHLO text (`jax.jit(f).lower(*args).as_text()`, what
mosaic_rt hands XLA, with source-site and launch ids, which hash the
checkout's path, numbered by first appearance) and the text's length. A kernel whose lowering raises
prints the error's type instead (the corpora hold deliberate errors).
`--save FILE` writes the lines; `--check FILE` compares with a saved file
and exits 1 listing every kernel whose program changed, appeared or
disappeared. `--only TEXT` keeps the kernels whose name contains TEXT.
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import re
import sys

from _common import use_cpu_devices

ROOT = pathlib.Path(__file__).resolve().parents[2]


_ID_ATTRS = re.compile(r"\w*(?:site|uid)s? = (?:dense<\[?)?([\d, ]+)")
_NUMBER = re.compile(r"\d{5,}")  # hashes; a small number is a real value


def _canonical(text: str) -> str:
    """``text`` with source-site and launch ids numbered by first appearance:
    both are hashes of where the kernel's source lives (the checkout's path),
    not part of the program."""
    ids: dict[str, str] = {}
    for m in _ID_ATTRS.finditer(text):
        for n in _NUMBER.findall(m.group(1)):
            ids.setdefault(n, f"#{len(ids)}")
    if not ids:
        return text
    return re.sub(r"\b(" + "|".join(sorted(ids, key=len, reverse=True)) + r")\b", lambda m: ids[m.group(1)], text)


def _fingerprint(lower) -> str:
    try:
        text = _canonical(lower())
    except Exception as e:  # noqa: BLE001 - a deliberate error is a fingerprint too
        return f"raises {type(e).__name__}"
    return f"{hashlib.sha256(text.encode()).hexdigest()[:16]} {len(text)}"


def _zoo():
    import jax
    from mosaic_rt.bench import zoo

    for k in zoo.kernels(0):

        def lower(k=k):
            program, args, _ = k.build()
            return program(k.params()[1]).lower(*args).as_text()

        if k.devices <= len(jax.devices()):
            yield f"zoo/{k.name}", lower


def _production():
    import jax
    import mosaic_rt
    from mosaic_rt.bench import production

    for name, (build, _devices, _tol) in production.KERNELS.items():

        def lower(build=build):
            op, _ref, args = build()
            with mosaic_rt.force_interpret_mode(mosaic_rt.InterpretParams()):
                fn = op()
                return (fn if hasattr(fn, "lower") else jax.jit(fn)).lower(*args).as_text()

        yield f"production/{name}", lower


def _test_corpora():
    import jax
    import mosaic_rt

    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from kernels import multi_device, single_device

    for module in (single_device, multi_device):
        for case in module.CASES:

            def lower(case=case):
                params = mosaic_rt.InterpretParams()
                return jax.jit(lambda *a: case.fn(params, *a)).lower(*case.args).as_text()

            yield f"{module.__name__.rsplit('.', 1)[1]}/{case.name}", lower


def fingerprints(only: str) -> dict[str, str]:
    out = {}
    for source in (_zoo, _production, _test_corpora):
        for name, lower in source():
            if only in name:
                out[name] = _fingerprint(lower)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(prog="emitted_programs.py", description=__doc__.split("\n")[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--save", type=pathlib.Path, help="write the fingerprints to FILE")
    group.add_argument("--check", type=pathlib.Path, help="compare with a saved FILE")
    ap.add_argument("--only", default="", help="kernels whose name contains TEXT")
    a = ap.parse_args()
    use_cpu_devices(8)
    lines = [f"{name}\t{fp}" for name, fp in fingerprints(a.only).items()]
    print("\n".join(lines))
    if a.save:
        a.save.write_text("\n".join(lines) + "\n")
    if a.check:
        saved = dict(ln.split("\t", 1) for ln in a.check.read_text().splitlines() if ln)
        now = dict(ln.split("\t", 1) for ln in lines)
        changed = sorted(
            n for n in saved.keys() | now.keys() if (not a.only or a.only in n) and saved.get(n) != now.get(n)
        )
        for n in changed:
            print(f"changed: {n}: {saved.get(n, 'absent')} -> {now.get(n, 'absent')}", file=sys.stderr)
        print(f"{len(now)} programs, {len(changed)} changed", file=sys.stderr)
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
