"""Jaxpr-to-jaxpr rewrites the interpreter applies before it evaluates a
block, each keeping every result bit-identical: `inlining` (a block's
`jit` calls spliced in), `hoisting` (a loop's invariant integer work
moved before it), `widening` (a SparseCore `parallel_loop` over
disjoint column chunks run as one pass) and `unrolled` (Python-unrolled
copies of such column work, run as one). They know jax's jaxprs only,
nothing of the native side."""

from mosaic_rt.interpret.rewrites.inlining import inline_calls
from mosaic_rt.interpret.rewrites.unrolled import widen_unrolled


def as_evaluated(jaxpr):
    """A block as the evaluator runs it, and as a parent plans it (the
    same object both ways): calls inlined, unrolled column copies widened."""
    return widen_unrolled(inline_calls(jaxpr))
