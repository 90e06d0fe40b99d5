"""Zero-cost proxies on real torch networks: values, determinism, isolation, definitions."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pytest

from dse.accuracy.proxies import PROXIES, proxy_scores
from dse.models import get_family

if TYPE_CHECKING:
    from torch import nn

TINY_CNN = {"num_stages": 1, "depth": 1, "width_mult": 0.5, "kernel_size": 3, "expand_ratio": 2}


def _tiny_cnn() -> nn.Module:
    import torch

    torch.manual_seed(0)
    return get_family("cnn").build(TINY_CNN)


def _mlp(activation: type[nn.Module] | None = None, dropout: float = 0.0) -> nn.Module:
    """A seeded MLP on 3x4 inputs; ``activation`` defaults to ``nn.GELU``."""
    import torch
    from torch import nn

    if activation is None:
        activation = nn.GELU
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
    import torch

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


def _integer_relu_net(weight: np.ndarray) -> nn.Module:
    """Linear -> ReLU -> Linear with integer weights and a bias of 1/2: on integer inputs every
    pre-activation is an integer plus 1/2, exact in float32 and never 0, so the activation codes
    are the same on every CPU."""
    import torch
    from torch import nn

    module = nn.Sequential(nn.Linear(weight.shape[1], weight.shape[0]), nn.ReLU(),
                           nn.Linear(weight.shape[0], 3))
    with torch.no_grad():
        module[0].weight.copy_(torch.from_numpy(weight.astype(np.float32)))
        module[0].bias.fill_(0.5)
    return module


def _hamming_kernel(weight: np.ndarray, x: np.ndarray) -> list[list[int]]:
    """Mellor et al.'s K_H, computed apart from dse: integer codes, then N_A - Hamming distance."""
    codes = (x.astype(np.int64) @ weight.T.astype(np.int64) * 2 + 1) > 0  # sign of (w.x + 1/2)
    hamming = (codes[:, None, :] != codes[None, :, :]).sum(axis=2)
    return (codes.shape[1] - hamming).tolist()


def _exact_determinant(kernel: list[list[int]]) -> int:
    """An independent exact determinant: Berkowitz's division-free method (dse eliminates)."""
    import sympy

    return int(sympy.Matrix(kernel).det(method="berkowitz"))


def _naswot(module: nn.Module, x: np.ndarray) -> float:
    return proxy_scores(module, x.astype(np.float32), np.zeros(len(x), np.int64),
                        names=["naswot"])["naswot"]


def test_naswot_is_the_exact_log_determinant_of_the_hamming_kernel() -> None:
    rng = np.random.default_rng(7)  # integer draws: the same on every platform
    weight = rng.integers(-2, 3, (12, 4))
    x = rng.integers(-3, 4, (6, 4))
    kernel = _hamming_kernel(weight, x)
    determinant = _exact_determinant(kernel)
    assert determinant > 0  # the batch is separable: this case has a finite score

    score = _naswot(_integer_relu_net(weight), x)

    assert score == math.log(determinant)
    # The kernel is well-conditioned, so a float LU agrees closely on any machine.
    assert score == pytest.approx(np.linalg.slogdet(np.array(kernel, dtype=np.float64))[1],
                                  rel=1e-9)


def test_naswot_of_two_inputs_with_one_activation_code_is_minus_inf() -> None:
    # w.(2x) + 1/2 has the sign of w.x + 1/2 for integer w.x, so x and 2x share a code: the
    # kernel has two equal rows, determinant exactly 0.
    rng = np.random.default_rng(7)
    weight = rng.integers(-2, 3, (12, 4))
    x = rng.integers(-3, 4, (5, 4))
    x = np.concatenate([x, 2 * x[:1]])
    kernel = _hamming_kernel(weight, x)
    assert kernel[0] == kernel[-1]

    assert _naswot(_integer_relu_net(weight), x) == -math.inf


def test_naswot_of_affinely_dependent_codes_is_minus_inf() -> None:
    # Four distinct codes with c1 + c2 = c3 + c4 (1100 + 0011 = 1010 + 0101): no two inputs look
    # alike, yet the kernel is singular. With identity weights, input 0 gives bit 1, -1 bit 0.
    x = np.array([[0, 0, -1, -1], [-1, -1, 0, 0], [0, -1, 0, -1], [-1, 0, -1, 0]])
    weight = np.eye(4, dtype=np.int64)
    assert _exact_determinant(_hamming_kernel(weight, x)) == 0

    assert _naswot(_integer_relu_net(weight), x) == -math.inf


def test_naswot_of_more_inputs_than_units_plus_one_is_minus_inf() -> None:
    # K_H = B B^T with rows [c_i, 1 - c_i] has rank at most N_A + 1: 8 inputs, 4 units.
    rng = np.random.default_rng(3)
    weight = rng.integers(-2, 3, (4, 6))
    x = rng.integers(-3, 4, (8, 6))

    assert _naswot(_integer_relu_net(weight), x) == -math.inf


def test_naswot_of_a_net_narrower_than_its_batch_is_minus_inf_on_every_machine() -> None:
    import torch

    from dse.accuracy import load_digits_split

    # 32 ReLU units, 64 digits: rank <= 33. A float LU of this kernel gave -1089.2 (torch) and
    # -1026.0 (numpy) on one machine, -inf on another.
    from dse.examples.models import digits_mlp

    split = load_digits_split(0)
    torch.manual_seed(0)
    module, _ = digits_mlp({"hidden": 32, "layers": 1})
    scores = proxy_scores(module, split.x_train[:64], split.y_train[:64], names=["naswot"])
    assert scores["naswot"] == -math.inf


def test_grad_norm_sums_the_weight_gradient_norms() -> None:
    import torch
    from torch import nn

    module = _mlp(nn.ReLU)
    x, y = MLP_BATCH
    nn.functional.cross_entropy(module(torch.from_numpy(x)), torch.from_numpy(y)).backward()
    expected = sum(float(p.grad.norm()) for p in module.parameters()
                   if p.dim() >= 2 and p.grad is not None)
    module.zero_grad(set_to_none=True)
    assert proxy_scores(module, x, y, names=["grad_norm"])["grad_norm"] == pytest.approx(expected)


def test_synflow_is_invariant_to_rescaling_neurons_of_a_relu_net() -> None:
    import torch
    from torch import nn

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
    import torch

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
    import torch
    from torch import nn

    torch.manual_seed(0)
    module = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.Tanh(), nn.Linear(8, 5))
    with pytest.raises(ValueError, match="naswot needs activation modules of type ReLU, ReLU6, "
                                         "LeakyReLU, GELU, SiLU"):
        proxy_scores(module, *MLP_BATCH, names=["naswot"])
    # The other proxies do not need them.
    assert set(proxy_scores(module, *MLP_BATCH, names=["synflow", "grad_norm"])) == {
        "synflow", "grad_norm"}
