"""Triton primer kernels (vector add, row softmax, tiled matmul) against PyTorch on random inputs.

In the CPU interpreter where there is no GPU (tests/conftest.py), compiled on CUDA otherwise.
"""
import random
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from flashlab.kernels import primer  # noqa: E402

pytestmark = pytest.mark.interpreter
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _gen():
    seed = random.randrange(2**31)
    return torch.Generator().manual_seed(seed), seed


def test_vector_add_matches_torch_for_a_ragged_length():
    g, seed = _gen()
    n = 3000  # not a multiple of the block: the last program is masked
    x, y = (torch.randn(n, generator=g).to(DEVICE) for _ in range(2))
    out = primer.add(x, y, block_size=1024)
    assert torch.equal(out, x + y), f"add differs from x + y (seed={seed})"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_row_softmax_matches_torch_and_survives_large_inputs(dtype):
    g, seed = _gen()
    x = (torch.randn(7, 100, generator=g) * 30 + 500).to(DEVICE, dtype)  # exp(500) overflows unless max-subtracted
    out = primer.softmax(x)
    ref = torch.softmax(x.double(), dim=-1)
    tol = 1e-6 if dtype == torch.float32 else 2e-3
    assert torch.isfinite(out).all(), f"softmax produced inf/NaN (seed={seed})"
    err = (out.double() - ref).abs().max().item()
    assert err < tol, f"softmax error {err:.3g} >= {tol} (seed={seed})"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_tiled_matmul_matches_torch_for_ragged_shapes(dtype):
    g, seed = _gen()
    a = torch.randn(45, 70, generator=g).to(DEVICE, dtype)  # (M, K), none a multiple of 32
    b = torch.randn(70, 33, generator=g).to(DEVICE, dtype)  # (K, N)
    c = primer.matmul(a, b)
    ref = a.double() @ b.double()
    # fp32 accumulation is exact enough; what remains is the rounding of the output to its dtype:
    # at most one unit in the last place (the interpreter truncates fp32 -> bf16 instead of
    # rounding to nearest, so a whole ulp, not half)
    ulp = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}[dtype]
    excess = ((c.double() - ref).abs() - (ulp * ref.abs() + 1e-4)).max().item()
    assert c.shape == (45, 33) and c.dtype == dtype
    assert excess <= 0, f"matmul {dtype}: an element is {excess:.3g} past one ulp of the reference (seed={seed})"


def test_tiled_matmul_rejects_mismatched_inner_dimensions():
    with pytest.raises(ValueError, match="a's columns must equal b's rows"):
        primer.matmul(torch.randn(4, 5, device=DEVICE), torch.randn(6, 4, device=DEVICE))


def test_softmax_rejects_a_vector():
    with pytest.raises(ValueError, match="x must have 2 dimension"):
        primer.softmax(torch.randn(5, device=DEVICE))


@pytest.mark.parametrize("block_size", [1000, 0, 64.0], ids=["not-power-of-two", "zero", "float"])
def test_vector_add_rejects_a_block_size_triton_cannot_arange(block_size):
    x = torch.randn(10, device=DEVICE)
    with pytest.raises(ValueError, match="block_size="):
        primer.add(x, x, block_size=block_size)


def test_to_tf32_keeps_ten_mantissa_bits_and_the_comparison_reports_both_errors():
    """1 + 2^-10 survives the cut, 1 + 2^-11 becomes 1; the comparison's tf32 error is the larger one."""
    x = torch.tensor([1 + 2**-10, 1 + 2**-11, -3.0], dtype=torch.float32)
    assert primer.to_tf32(x).tolist() == [1 + 2**-10, 1.0, -3.0]
    with pytest.raises(TypeError, match="t must be a float32"):
        primer.to_tf32(x.double())
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(40, 72, generator=g).to(DEVICE), torch.randn(72, 24, generator=g).to(DEVICE)
    c = primer.matmul(a, b)
    text = primer.tf32_comparison(a, b, c)
    ours, tf32 = (float(x) for x in re.findall(r"\d\.\de[-+]\d+", text))
    assert ours < 1e-4 < tf32, text
