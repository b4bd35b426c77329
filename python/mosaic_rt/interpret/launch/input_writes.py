"""Which HBM inputs of a pallas_call the kernel can never write.

Such an input needs no copy in our simulated HBM: the runtime borrows
XLA's operand memory read-only for the launch (`buffers.allocate`). The
proof is syntactic and conservative: the kernel's ref of the input (when it
sees the HBM buffer at all) may only be loaded from, be the source of a DMA
(local or remote: every device runs this same jaxpr, so a peer's DMA into
our input would show here as a DMA into its own), be waited on, or be passed
into a sub-jaxpr (run_scoped, cond, scan, while, jit) where the same rules
hold. Any other use, or a primitive not listed here, means "may write" and
the input is copied as before.
"""

from __future__ import annotations

import jax

from mosaic_rt import jax_internals as jx

# A ref operand of these is only read.
_READS = {p for p in (jx.get_p, jx.load_p) if p is not None}


def never_written(jaxpr: jx.Jaxpr, kernel_vars) -> list[bool]:
    """Per var of `kernel_vars` (vars of `jaxpr`: kernel refs), whether no
    equation of `jaxpr` or of its sub-jaxprs can write through it."""
    return [not _may_write(jaxpr, v) for v in kernel_vars]


def _may_write(jaxpr, var) -> bool:
    if any(o is var for o in jaxpr.outvars):
        return True  # a ref returned from a sub-jaxpr: not followed
    for eqn in jaxpr.eqns:
        at = [i for i, v in enumerate(eqn.invars) if v is var]
        if at and _eqn_may_write(eqn, at):
            return True
    return False


def _eqn_may_write(eqn, at: list[int]) -> bool:
    """Whether `eqn`, given the tracked ref as operands `at`, may write it."""
    prim, p = eqn.primitive, eqn.params
    if prim in _READS:
        return at != [0]  # the ref operand itself; anything else is unknown
    if prim is jx.dma_start_p:
        # Operand tree (src, dst, dst_sem, src_sem, device_id): only src
        # leaves may be ours.
        n_src = p["tree"].children()[0].num_leaves
        return any(i >= n_src for i in at)
    if prim is jx.dma_wait_p:
        return False  # reads only the ref's shape (the byte count)
    inner = _sub_jaxpr_vars(eqn)
    if inner is None or any(len(vars_) != len(eqn.invars) for _, vars_ in inner):
        return True
    # None: the sub-jaxpr does not bind that operand, so cannot write it.
    return any(vars_[i] is not None and _may_write(jaxpr, vars_[i]) for i in at for jaxpr, vars_ in inner)


def _sub_jaxpr_vars(eqn):
    """``[(jaxpr, vars)]``: each sub-jaxpr of `eqn` and, per operand of the
    equation, the var of that jaxpr it binds (as `jaxpr_eval` binds them);
    ``None`` for an equation whose operands cannot be followed."""
    prim, p = eqn.primitive, eqn.params
    n = len(eqn.invars)
    if prim is jx.run_scoped_p:
        # The operands (closed over) bind its constvars; its invars are
        # the scoped allocations, no operands.
        body = p["jaxpr"]
        return [(body, list(body.constvars))]
    if prim is jx.jit_p:
        return [(_open(p["jaxpr"]), _open(p["jaxpr"]).invars)]
    if prim is jax.lax.cond_p:
        # Operand 0 is the branch index.
        return [(_open(b), [None, *_open(b).invars]) for b in p["branches"]]
    if prim is jax.lax.scan_p:
        consts, init, xs = jx.scan_operands(p, list(range(n)))
        body = _open(p["jaxpr"])
        order = [*consts, *init, *xs]
        vars_ = [None] * n
        for pos, i in enumerate(order):
            vars_[i] = body.invars[pos]
        return [(body, vars_)]
    if prim is jax.lax.while_p:
        cond_n, body_n = p["cond_nconsts"], p["body_nconsts"]
        cond, body = _open(p["cond_jaxpr"]), _open(p["body_jaxpr"])
        init = body.invars[body_n:]
        return [
            (cond, [*cond.invars[:cond_n], *[None] * body_n, *cond.invars[cond_n:]]),
            (body, [*[None] * cond_n, *body.invars[:body_n], *init]),
        ]
    return None


def _open(closed):
    return jx.closed_jaxpr_parts(closed)[0]
