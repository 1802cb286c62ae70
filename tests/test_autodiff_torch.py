"""`rlx.grad` compiled (`rlx.jit`) against torch.autograd: every differentiable op of the
elementwise and linalg families (tests/autodiff_cases.py), and whole blocks built from
primitives (a SwiGLU FFN, a Llama-style decoder block), at rtol 1e-4 / atol 1e-5.

Each family is one graph, compiled once (module-scoped fixtures)."""

from __future__ import annotations

import numpy as np
import pytest
from autodiff_cases import BLOCKS, ELEMENTWISE, LINALG, Case, Family

import rlx_mlir as rlx

torch = pytest.importorskip("torch")

RTOL, ATOL = 1e-4, 1e-5


def torch_grads(case: Case, family: Family) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The case's weighted sum and the gradients of its inputs, by torch (float32)."""
    tensors = [torch.tensor(family.arrays[f"{case.name}__{i}"], requires_grad=True)
               for i in range(len(case.shapes))]
    y = case.torch(torch, *tensors)
    term = (y * torch.tensor(family.arrays[f"{case.name}__ct"])).sum()
    term.backward()
    grads = {f"{case.name}__{i}": tensors[i].grad.numpy() for i in case.differentiated()}
    return term.detach().numpy(), grads


def _compiled(cases: list[Case], seed: int) -> tuple[Family, dict[str, np.ndarray], float]:
    family = Family(cases, seed)
    model = rlx.jit(family.grad_graph())
    loss, *grads = model(**family.arrays)
    return family, family.split(grads), float(loss)


@pytest.fixture(scope="module")
def elementwise():
    return _compiled(ELEMENTWISE, 1)


@pytest.fixture(scope="module")
def linalg():
    return _compiled(LINALG, 2)


@pytest.fixture(scope="module")
def blocks():
    return _compiled(BLOCKS, 3)


def _check(case: Case, compiled: tuple[Family, dict[str, np.ndarray], float]) -> None:
    family, got, _ = compiled
    _, want = torch_grads(case, family)
    for name, expected in want.items():
        np.testing.assert_allclose(got[name], expected, rtol=case.tol.get("rtol", RTOL),
                                   atol=case.tol.get("atol", ATOL), err_msg=name)


@pytest.mark.parametrize("case", ELEMENTWISE, ids=[c.name for c in ELEMENTWISE])
def test_elementwise_gradients_match_torch(case, elementwise):
    _check(case, elementwise)


@pytest.mark.parametrize("case", LINALG, ids=[c.name for c in LINALG])
def test_linalg_gradients_match_torch(case, linalg):
    _check(case, linalg)


@pytest.mark.parametrize("case", BLOCKS, ids=[c.name for c in BLOCKS])
def test_block_gradients_match_torch(case, blocks):
    _check(case, blocks)


def test_the_loss_is_the_sum_of_the_cases(linalg):
    family, _, loss = linalg
    want = sum(float(torch_grads(case, family)[0]) for case in family.cases)
    assert loss == pytest.approx(want, rel=1e-4)
