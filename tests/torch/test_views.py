"""Views on the device alias their base as on the CPU: writes through `.data`, `detach()`,
slices, transposes and `weight[idx]` reach every tensor that shares the storage. Checked
against the same code on CPU tensors, on fresh random values."""

import pytest
import torch

import lazytensor_torch as ltt

from conftest import DEVICE


def both(shape):
    x = torch.randn(shape)
    return x, x.to(DEVICE)


@pytest.mark.parametrize("write", [
    lambda t: t.t()[0].add_(1.5),
    lambda t: t[1:3, ::2].fill_(5),
    lambda t: t[:, 1].mul_(t[:, 2]),
    lambda t: t.view(-1)[3:7].zero_(),
    lambda t: t.unsqueeze(0).transpose(1, 2)[0, 2].copy_(torch.arange(3.0)),
    lambda t: t.as_strided((2, 2), (5, 1), 1).sub_(1),
], ids=["transpose", "strided_slice", "column_times_column", "flat_view", "chain", "as_strided"])
def test_writes_through_views_reach_the_base(write):
    x, d = both((3, 4))
    write(x)
    write(d)
    torch.testing.assert_close(d.cpu(), x, rtol=0, atol=0)


def test_reads_through_views_match_the_cpu():
    x, d = both((2, 3, 4))
    for view in (lambda t: t.permute(2, 0, 1).reshape(4, 6),
                 lambda t: t[:, None, 1].expand(2, 5, 4),
                 lambda t: t.as_strided((3, 2), (4, 1), 2),
                 lambda t: t.select(2, -1).t(),
                 lambda t: t.narrow(1, 1, 2).unsqueeze(-1)):
        torch.testing.assert_close((view(d) * 2).cpu(), view(x) * 2, rtol=0, atol=0)


def test_data_detach_and_padding_rows_share_storage():
    w = torch.nn.Parameter(torch.randn(5, 3))
    wd = torch.nn.Parameter(w.detach().to(DEVICE))
    with torch.no_grad():
        torch.nn.init.zeros_(wd[2])  # as transformers zeroes an embedding's padding row
    assert wd[2].abs().sum().item() == 0 and wd[1].abs().sum().item() > 0
    wd.data.mul_(2)
    expected = w.detach().clone() * 2
    expected[2] = 0
    torch.testing.assert_close(wd.detach().cpu(), expected, rtol=0, atol=0)
    wd.detach().zero_()
    assert wd.abs().sum().item() == 0


def test_ops_without_a_kernel_fall_back_to_the_cpu_and_are_counted():
    before = ltt.metrics.counter_value("Fallback")
    x, d = both((6,))
    torch.testing.assert_close(torch.cumsum(d, 0).cpu(), torch.cumsum(x, 0))
    assert ltt.metrics.counter_value("Fallback") == before + 1
    assert ltt.metrics.fallback_counts().get("aten::cumsum.out", 0) >= 1
    mask = x > 0
    torch.testing.assert_close(d[mask.to(DEVICE)].cpu(), x[mask])  # a bool mask falls back
    assert ltt.metrics.fallback_counts().get("aten::index.Tensor", 0) >= 1


def test_views_without_a_kernel_are_refused_by_name():
    with pytest.raises(RuntimeError, match="aten::unfold"):
        torch.ones(6, device=DEVICE).unfold(0, 2, 1)


def test_unsupported_dtypes_are_refused_by_name():
    with pytest.raises(RuntimeError, match="empty: the lazytensor device has no ComplexFloat"):
        torch.zeros(3, dtype=torch.complex64, device=DEVICE)
