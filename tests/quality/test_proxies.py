"""Zero-cost proxies on real torch networks: values, determinism, isolation, definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from dse.models import get_family
from dse.quality.proxies import PROXIES, proxy_scores

TINY_CNN = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}


def _tiny_cnn() -> nn.Module:
    torch.manual_seed(0)
    return get_family("cnn").build(TINY_CNN)


def _mlp(activation: type[nn.Module] = nn.GELU, dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 32), activation(), nn.Dropout(dropout),
                         nn.Linear(32, 32), activation(), nn.Linear(32, 5))


def _batch(n: int, shape: tuple[int, ...], classes: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((n, *shape), dtype=np.float32),
            rng.integers(0, classes, n).astype(np.int64))


CNN_BATCH = _batch(16, (1, 8, 8), 10)
MLP_BATCH = _batch(16, (3, 4), 5)


@pytest.mark.parametrize(("build", "batch"), [(_tiny_cnn, CNN_BATCH), (_mlp, MLP_BATCH)],
                         ids=["cnn", "gelu-mlp"])
def test_every_proxy_gives_a_finite_float(build: object, batch: tuple[np.ndarray, np.ndarray]) -> None:
    assert callable(build)
    scores = proxy_scores(build(), *batch)
    assert list(scores) == list(PROXIES)
    for name, value in scores.items():
        assert isinstance(value, float), name
        assert math.isfinite(value), (name, value)


def test_same_inputs_and_seed_give_identical_scores() -> None:
    module = _mlp(dropout=0.5)
    assert proxy_scores(module, *MLP_BATCH, seed=3) == proxy_scores(module, *MLP_BATCH, seed=3)
    cnn = _tiny_cnn()
    assert proxy_scores(cnn, *CNN_BATCH) == proxy_scores(cnn, *CNN_BATCH)


def test_seed_feeds_only_stochastic_layers() -> None:
    # Dropout draws from the seeded stream; synflow runs in eval mode and has nothing to draw.
    module = _mlp(dropout=0.5)
    first, second = (proxy_scores(module, *MLP_BATCH, seed=s) for s in (0, 1))
    assert first["synflow"] == second["synflow"]
    assert first["grad_norm"] != second["grad_norm"]
    no_dropout = _mlp()
    assert proxy_scores(no_dropout, *MLP_BATCH, seed=0) == proxy_scores(no_dropout, *MLP_BATCH,
                                                                        seed=1)


def test_callers_module_and_rng_are_untouched() -> None:
    module = _tiny_cnn()
    module.eval()
    frozen = next(module.parameters())
    frozen.requires_grad_(False)
    before = {key: value.clone() for key, value in module.state_dict().items()}
    flags = [p.requires_grad for p in module.parameters()]
    rng_state = torch.get_rng_state()

    proxy_scores(module, *CNN_BATCH)

    assert torch.equal(torch.get_rng_state(), rng_state)
    assert not module.training
    assert [p.requires_grad for p in module.parameters()] == flags
    assert all(p.grad is None for p in module.parameters())
    after = module.state_dict()
    assert all(torch.equal(before[key], after[key]) for key in before)
    assert next(module.parameters()).dtype == torch.float32


def test_naswot_is_the_log_determinant_of_the_hamming_kernel() -> None:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    x, y = _batch(5, (4,), 3)
    with torch.no_grad():
        codes = (module[0](torch.from_numpy(x)) > 0).numpy()
    units = codes.shape[1]
    hamming = (codes[:, None, :] != codes[None, :, :]).sum(axis=2)
    expected = np.linalg.slogdet(units - hamming)[1]
    assert proxy_scores(module, x, y, names=["naswot"])["naswot"] == pytest.approx(expected)


def test_grad_norm_sums_the_weight_gradient_norms() -> None:
    module = _mlp(nn.ReLU)
    x, y = MLP_BATCH
    nn.functional.cross_entropy(module(torch.from_numpy(x)), torch.from_numpy(y)).backward()
    expected = sum(float(p.grad.norm()) for p in module.parameters()
                   if p.dim() >= 2 and p.grad is not None)
    module.zero_grad(set_to_none=True)
    assert proxy_scores(module, x, y, names=["grad_norm"])["grad_norm"] == pytest.approx(expected)


def test_synflow_is_invariant_to_rescaling_neurons_of_a_relu_net() -> None:
    # Tanaka et al.: in a positively homogeneous net, scaling one layer's units by c and the next
    # layer's weights by 1/c leaves R, and every |theta * dR/dtheta|, unchanged. c is a power of
    # two so that the float32 weights scale exactly.
    module = _mlp(nn.ReLU)
    before = proxy_scores(module, *MLP_BATCH, names=["synflow"])["synflow"]
    with torch.no_grad():
        module[1].weight.mul_(4.0)
        module[1].bias.mul_(4.0)
        module[4].weight.div_(4.0)
    after = proxy_scores(module, *MLP_BATCH, names=["synflow"])["synflow"]
    assert after == pytest.approx(before, rel=1e-12)


def test_synflow_grows_with_depth_and_width() -> None:
    # Data-free and linearised: a wider or deeper net carries more flow.
    family = get_family("cnn")
    scores = []
    for arch in (TINY_CNN, {**TINY_CNN, "width_mult": 1.0}, {**TINY_CNN, "depth": 3}):
        torch.manual_seed(0)
        scores.append(proxy_scores(family.build(arch), *CNN_BATCH, names=["synflow"])["synflow"])
    assert scores[0] < scores[1] and scores[0] < scores[2]


def test_unknown_proxy_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown proxy name\(s\) \['snip'\]; known: synflow, "
                                         r"naswot, grad_norm"):
        proxy_scores(_mlp(), *MLP_BATCH, names=["synflow", "snip"])


@pytest.mark.parametrize(("inputs", "labels", "message"), [
    (np.zeros((0, 3, 4), np.float32), np.zeros(0, np.int64), "non-empty batch"),
    (np.zeros((4, 3, 4), np.float32), np.zeros(3, np.int64), "4 inputs and labels of shape"),
    (np.zeros((4, 3, 4), np.float32), np.full(4, -1), "non-negative integer classes"),
    (np.full((4, 3, 4), np.nan, np.float32), np.zeros(4, np.int64), "finite numbers"),
], ids=["empty", "label-count", "negative-label", "nan-input"])
def test_bad_batches_are_named(inputs: np.ndarray, labels: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        proxy_scores(_mlp(), inputs, labels)


def test_label_beyond_the_logits_is_named() -> None:
    x, _ = MLP_BATCH
    with pytest.raises(ValueError, match=r"classes 0\.\.4 of the 5 logits, got a label 9"):
        proxy_scores(_mlp(), x, np.full(len(x), 9), names=["grad_norm"])


def test_naswot_names_the_activation_types_it_needs() -> None:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.Tanh(), nn.Linear(8, 5))
    with pytest.raises(ValueError, match="naswot needs activation modules of type ReLU, ReLU6, "
                                         "LeakyReLU, GELU, SiLU"):
        proxy_scores(module, *MLP_BATCH, names=["naswot"])
    # The other proxies do not need them.
    assert set(proxy_scores(module, *MLP_BATCH, names=["synflow", "grad_norm"])) == {
        "synflow", "grad_norm"}
