"""What the interpreter emits around a kernel's own work, checked in the
lowered program: the scaffolding XLA must compile for every kernel stays
small (each op costs lowering and compile time on every cold call)."""

from __future__ import annotations

import re

import mosaic_rt
import pytest
from lowered_text import native_ops
from mosaic_rt.bench import collectives

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _lowered(program, args) -> str:
    return program(mosaic_rt.InterpretParams()).lower(*args).as_text()


def test_ops_with_only_static_starts_share_one_empty_start_vector():
    """A ring reduce-scatter's 30-odd loads, swaps and DMAs with static
    starts all take the same empty vector (it was a constant and a broadcast
    per op)."""
    text = _lowered(*collectives.reduce_scatter(8, 8))
    empty = re.findall(r"stablehlo\.broadcast_in_dim .*-> tensor<0xi32>", text)
    assert len(empty) == 1, len(empty)
    ops = native_ops(text)
    assert ops["load"] + ops["swap"] + ops["dma_start"] > 20


@pytest.mark.parametrize("kernel", ["all_gather", "right_permute"])
def test_mesh_device_ids_need_no_multiply_by_one(kernel):
    """A 1-axis mesh's device id is its coordinate: no `* 1 + 0` emitted."""
    text = _lowered(*getattr(collectives, kernel)(8, 8))
    assert "stablehlo.multiply" not in text


def test_one_dynamic_start_is_passed_as_a_scalar():
    """A ring all-gather's loads and DMAs at a traced slot take the slot
    itself (it was a reshape to a 1-vector per operand: 16 in all)."""
    text = _lowered(*collectives.all_gather(8, 8))
    assert len(re.findall(r"stablehlo\.reshape .*-> tensor<1xi32>", text)) == 0


def test_a_grid_loop_carries_no_empty_start_vectors():
    """Whole-buffer loads and stores in a grid body take the body's own empty
    vector: none is made outside and carried through the loop (a numpy
    constant was hoisted out and carried, one per op)."""
    from mosaic_rt.bench import local

    program, args = local.blockspec_add(8, 40)
    text = _lowered(program, args)
    loop = next(line for line in text.splitlines() if "stablehlo.while" in line)
    assert "tensor<0xi32>" not in loop.split(":", 1)[1], loop
