"""Straight-line array code: a program of statements over named values, its
source text, and the transformations the shrinker tries on it.

A program has inputs (named, typed), statements ``name = expr(args)`` and
outputs (names). Every statement's type was found by tracing it
(`values.trace_aval`), so any program the generator or the shrinker makes is
valid jax. Categories that compute over arrays (elementwise, the compute of
grid and memory kernels) share it.
"""

from __future__ import annotations

import dataclasses

from fuzzing.values import Aval


@dataclasses.dataclass(frozen=True)
class Stmt:
    name: str
    expr: str  # with {0}, {1}, ... for the operands
    args: tuple  # operand names
    aval: Aval
    # The same statement outside a kernel (eager jax), where it differs
    # (`pltpu.roll` has no evaluation rule outside a kernel: `jnp.roll`).
    meaning_expr: str | None = None

    def text(self, meaning: bool = False) -> str:
        expr = self.meaning_expr if meaning and self.meaning_expr else self.expr
        return f"{self.name} = {expr.format(*self.args)}"


@dataclasses.dataclass(frozen=True)
class Program:
    inputs: tuple  # ((name, Aval), ...)
    stmts: tuple  # Stmt, ...
    outputs: tuple  # names

    def avals(self) -> dict:
        out = dict(self.inputs)
        out.update((s.name, s.aval) for s in self.stmts)
        return out

    def body(self, fn_name: str, meaning: bool = False) -> str:
        """``def fn_name(inputs...): stmts; return [outputs]``."""
        lines = [f"def {fn_name}({', '.join(n for n, _ in self.inputs)}):"]
        lines += [f"    {s.text(meaning)}" for s in self.stmts]
        lines.append(f"    return [{', '.join(self.outputs)}]")
        return "\n".join(lines)

    # -- shrinking -------------------------------------------------------

    def pruned(self) -> Program:
        """Without the statements no output needs (inputs are kept: the
        kernel's signature is the caller's business)."""
        live = set(self.outputs)
        kept = []
        for s in reversed(self.stmts):
            if s.name in live:
                kept.append(s)
                live.update(s.args)
        return dataclasses.replace(self, stmts=tuple(reversed(kept)))

    def used_inputs(self) -> set:
        used = set(self.outputs)
        for s in self.stmts:
            used.update(s.args)
        return {n for n, _ in self.inputs if n in used}

    def substitute(self, old: str, new: str) -> Program:
        """Every read of ``old`` reads ``new`` (of the same type) instead."""
        stmts = tuple(dataclasses.replace(s, args=tuple(new if a == old else a for a in s.args)) for s in self.stmts)
        outputs = tuple(new if o == old else o for o in self.outputs)
        return dataclasses.replace(self, stmts=stmts, outputs=outputs).pruned()

    def shrinks(self, make_input_ok=lambda aval: True):
        """Smaller programs, most aggressive first: fewer outputs; a
        statement replaced by one of its operands of the same type; a
        statement made an input (what it computed becomes data)."""
        if len(self.outputs) > 1:
            for k in range(len(self.outputs)):
                yield dataclasses.replace(self, outputs=self.outputs[:k] + self.outputs[k + 1 :]).pruned()
        avals = self.avals()
        for s in reversed(self.stmts):
            for a in dict.fromkeys(s.args):
                if avals[a] == s.aval:
                    yield self.substitute(s.name, a)
        for s in reversed(self.stmts):
            if s.args and make_input_ok(s.aval):
                stmts = tuple(t for t in self.stmts if t is not s)
                yield dataclasses.replace(self, inputs=(*self.inputs, (s.name, s.aval)), stmts=stmts).pruned()
