"""Jaxpr-to-jaxpr rewrites the interpreter applies before it evaluates a
block, each keeping every result bit-identical: `inlining` (a block's
`jit` calls spliced in), `hoisting` (a loop's invariant integer work
moved before it), `widening` (a SparseCore `parallel_loop` over
disjoint column chunks run as one pass) and `unrolled` (Python-unrolled
copies of such column work, run as one). They know jax's jaxprs only,
nothing of the native side."""
