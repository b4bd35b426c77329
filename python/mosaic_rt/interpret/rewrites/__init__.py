"""Jaxpr-to-jaxpr rewrites the interpreter applies before it evaluates a
block, each keeping every result bit-identical: `inlining` (a block's
`jit` calls spliced in) and `hoisting` (a counted loop's invariant integer
work moved before it). They know jax's jaxprs only, nothing of the
native side."""
