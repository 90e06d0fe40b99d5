"""Zero-cost proxies: predict how well an untrained network will train, from one minibatch.

A proxy costs one forward (and at most one backward) pass, where training costs hundreds, so a
search can use it as a cheap objective or to drop hopeless candidates before training them. Every
score here reads **higher = predicted better**.

- ``synflow``: Tanaka et al. 2020, "Pruning neural networks without any data by iteratively
  conserving synaptic flow" (NeurIPS), as a whole-network score in Abdelfattah et al. 2021,
  "Zero-Cost Proxies for Lightweight NAS" (ICLR). Data-free.
- ``naswot``: Mellor et al. 2021, "Neural Architecture Search without Training" (ICML).
- ``grad_norm``: Abdelfattah et al. 2021 (same paper as above).

``synflow`` and ``naswot`` have a defined lowest score, ``-inf``: no flow at all, or a batch the
untrained network cannot separate (a singular NASWOT kernel). It is a score like any other (the
worst), not a failure: :data:`dse.core.metrics.METRICS` marks these metrics ``infinite_worst``.

Each proxy runs on a deep copy of the caller's module; see :func:`proxy_scores` for what is left
untouched. Torch is imported inside the functions that need it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from dse.plugins import PROXIES as PROXIES
from dse.plugins import ProxyDeclaration, register_proxy

if TYPE_CHECKING:
    import torch

# What a proxy's defined lowest score, -inf, says of the network, for messages.
_SYNFLOW_LOWEST = "no flow reaches the output of the linearised network"
_NASWOT_LOWEST = ("its activation-code kernel is singular: samples of the batch share a code, or "
                  "their codes are otherwise affinely dependent, so the untrained network cannot "
                  "separate them")

# The ReLU-type activation modules (torch.nn classes, and their subclasses): NASWOT reads their
# sign patterns, and synflow's linearised network replaces them with identities. Named, so that
# importing this module costs no torch import.
ACTIVATION_TYPES: tuple[str, ...] = ("ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU")
# Normalisation layers, which synflow's linearised network also replaces with identities.
NORMALIZATION_TYPES: tuple[str, ...] = (
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "InstanceNorm1d",
    "InstanceNorm2d", "InstanceNorm3d", "LayerNorm", "GroupNorm", "RMSNorm")


def proxy_scores(module: torch.nn.Module, inputs: np.ndarray, labels: np.ndarray, *,
                 names: Sequence[str] | None = None, seed: int = 0) -> dict[str, float]:
    """Zero-cost proxy scores of ``module`` (higher = predicted better), one per name in ``names``
    (None: every registered proxy, :data:`dse.plugins.proxies.PROXIES`).

    ``module`` is any classifier whose forward maps a float32 batch shaped like ``inputs`` to
    ``(batch, classes)`` logits; ``labels`` are the batch's integer classes. Scores from
    different architectures are comparable only when computed on the same ``inputs`` (NASWOT
    grows with the batch size).

    Each proxy works on its own deep copy of ``module``: the caller's weights, buffers, gradients,
    train/eval mode and ``requires_grad`` flags are left as they were, and so is the global torch
    RNG state (the copy runs in a forked RNG seeded with ``seed``, which only stochastic layers
    such as dropout consume). The same module, inputs, labels and seed give the same numbers.
    ``synflow`` and ``naswot`` may be ``-inf``, their defined lowest score (see each one).

    Raises ValueError for an unknown proxy name, empty or non-finite inputs, labels that are not
    one non-negative integer class per input, logits of the wrong shape, or (``naswot``) a
    network with no ReLU-type activation module.
    """
    wanted = _checked_names(names)
    x, y = _checked_batch(inputs, labels)
    import torch

    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    x_t, y_t = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    scores: dict[str, float] = {}
    for name in wanted:
        with _isolated_rng(device, seed), torch.inference_mode(False), torch.enable_grad():
            scores[name] = PROXIES[name].score(copy.deepcopy(module), x_t, y_t)
    return scores


def _synflow(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Natural log of the synaptic flow of ``model`` (modified in place: pass a copy).

    Tanaka et al. 2020 score each parameter by ``|theta * dR/dtheta|`` where
    ``R = 1^T (prod_l |W_l|) 1`` is the output of the network with every weight replaced by its
    absolute value, fed an all-ones input; Abdelfattah et al. 2021 sum those scores over the
    network and run it in double precision, which the products of many layers would otherwise
    overflow. Here:

    - every parameter and buffer takes its absolute value (the signs are dropped, not restored:
      the model is a copy); the model runs in float64 on one all-ones sample shaped like ``x``,
      in eval mode (dropout off), and ``R`` is the sum of its outputs;
    - normalisation layers (:data:`NORMALIZATION_TYPES`) become identities. That is Abdelfattah
      et al.'s ``synflow`` (their ``bn=False`` default, which turns batch norm into a no-op);
      we extend it to layer/group norms because normalising one constant-derived sample would
      undo the weight magnitudes the score measures;
    - ReLU-type activations (:data:`ACTIVATION_TYPES`) become identities. For ReLU this changes
      nothing — with non-negative weights and input every pre-activation is positive — and it
      makes ``R`` the linearised network the paper defines for the others too: ReLU6 clamps at
      6 (in a 3-stage ``cnn`` most ReLU6 inputs exceed 6 here, which cuts the flow and scores
      that net barely above a 1-block one), and GELU/SiLU are not positively homogeneous.
      Activations called as functions inside ``forward`` stay as they are;
    - the sum runs over weight tensors only — parameters of two or more dimensions (conv
      kernels, linear and attention matrices), as Abdelfattah et al. score conv and linear
      weights — not biases or normalisation affines.

    The log keeps the score in float range (synflow grows geometrically with depth) and leaves
    rankings unchanged; a network whose flow is zero scores ``-inf``.
    """
    import torch

    _replace_with_identity(model, NORMALIZATION_TYPES + ACTIVATION_TYPES)
    model.double().eval()
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.is_floating_point():
                tensor.abs_()
    weights = _trainable_weights(model)
    ones = torch.ones((1, *x.shape[1:]), dtype=torch.float64, device=x.device)
    torch.autograd.backward(_logits(model, ones).sum())
    total = math.fsum(float((w.detach() * w.grad).abs().sum()) for w in weights if w.grad is not None)
    return math.log(total) if total > 0 else -math.inf


def _naswot(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """``log det K_H`` of the activation-pattern kernel of ``model`` on the batch ``x``.

    Mellor et al. 2021: each input ``i`` gets a binary code ``c_i``, one bit per rectified unit
    (1 where the unit's pre-activation is positive); ``K_H[i, j] = N_A - d_H(c_i, c_j)``, with
    ``N_A`` the number of units and ``d_H`` the Hamming distance, counts the units on which two
    inputs agree. A network that separates the inputs of a batch into different linear regions
    has a better-conditioned ``K_H`` and a higher score.

    ``K_H = B B^T`` with row ``b_i = [c_i, 1 - c_i]`` is a Gram matrix, so ``det K_H >= 0``, and it
    is 0 exactly when the codes are affinely dependent: two inputs with the same code (the network
    cannot tell them apart), more inputs than ``N_A + 1``, or any other dependency. The paper's
    ``log det`` is then ``log 0 = -inf``, the lowest score, and that is what this returns. The
    kernel's entries are integers, so the determinant is computed exactly (see
    :func:`_log_det_of_integer_kernel`): a float LU of a singular kernel gives ``-inf`` or a
    rounding-noise value (``-31.97`` was seen), whichever the CPU's LAPACK kernels produce, and a
    nearly singular one loses the digits that rank it.

    The units are the inputs of every ReLU-type activation module (:data:`ACTIVATION_TYPES`;
    GELU and SiLU, smooth ReLUs, are read by the same sign rule). The network runs in train mode,
    as when training starts (batch norm uses batch statistics). Raises ValueError when the
    network has none of those modules (activations called as functions cannot be hooked).
    """
    import torch

    activations = [m for m in model.modules() if isinstance(m, _torch_types(ACTIVATION_TYPES))]
    if not activations:
        raise ValueError(f"naswot needs activation modules of type {', '.join(ACTIVATION_TYPES)} "
                         f"(torch.nn); {type(model).__name__} has none (activations called as "
                         f"functions in forward cannot be hooked)")
    kernel = torch.zeros((len(x), len(x)), dtype=torch.float64, device=x.device)

    def add_codes(_module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        # A pre-hook sees the pre-activation even when the activation works in place. Products
        # and sums of 0/1 values are integers below 2**53, exact in float64 in any order.
        codes = (args[0].detach().flatten(1) > 0).double()
        kernel.add_(codes @ codes.T + (1 - codes) @ (1 - codes).T)

    handles = [m.register_forward_pre_hook(add_codes) for m in activations]
    model.train()
    with torch.no_grad():
        model(x)
    for handle in handles:
        handle.remove()
    return _log_det_of_integer_kernel(kernel.cpu().numpy())


def _log_det_of_integer_kernel(kernel: np.ndarray) -> float:
    """``log det`` of a positive semi-definite matrix of integers (held as floats), ``-inf``
    when it is singular; the same number on every machine.

    The determinant is computed exactly, over the integers (sympy's fraction-free elimination in
    :class:`~sympy.polys.matrices.DomainMatrix`; sympy comes with torch), and only its logarithm
    is rounded. For the 64-sample batches of a campaign this takes about 0.1 s; the cost grows
    as the cube of the batch size.
    """
    from sympy import ZZ
    from sympy.polys.matrices import DomainMatrix

    integers = np.rint(kernel).astype(np.int64)
    if not np.array_equal(integers, kernel):
        raise ValueError("the activation-code kernel must hold integers (counts of units)")
    rows = [[ZZ(int(value)) for value in row] for row in integers.tolist()]
    determinant = int(DomainMatrix(rows, integers.shape, ZZ).det())
    # A Gram matrix has no negative determinant; 0 is the singular kernel.
    return math.log(determinant) if determinant > 0 else -math.inf


def _grad_norm(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Sum over weight tensors of the L2 norm of the cross-entropy gradient on the batch.

    Abdelfattah et al. 2021's ``grad_norm``: one backward pass of the mean cross-entropy of
    ``(x, y)`` at the current weights (initialisation), in train mode, as the first training step
    would take it; weight tensors are the parameters of two or more dimensions, as in
    :func:`_synflow`. Larger gradients predict faster learning.
    """
    import torch

    weights = _trainable_weights(model)
    model.train()
    logits = _logits(model, x)
    if int(y.max()) >= logits.shape[1]:
        raise ValueError(f"labels must be classes 0..{logits.shape[1] - 1} of the "
                         f"{logits.shape[1]} logits, got a label {int(y.max())}")
    torch.autograd.backward(torch.nn.functional.cross_entropy(logits, y))
    return float(sum(float(w.grad.norm()) for w in weights if w.grad is not None))


def _checked_names(names: Sequence[str] | None) -> list[str]:
    if names is None:
        return list(PROXIES)
    if isinstance(names, str):
        names = [names]
    unknown = [name for name in names if name not in PROXIES]
    if unknown:
        raise ValueError(f"unknown proxy name(s) {unknown}; known: {', '.join(PROXIES)}")
    return list(dict.fromkeys(names))


def _checked_batch(inputs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(inputs), np.asarray(labels)
    if x.ndim < 2 or len(x) == 0:
        raise ValueError(f"inputs must be a non-empty batch (batch axis first), got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.number) or not np.all(np.isfinite(x)):
        raise ValueError(f"inputs must be finite numbers, got dtype {x.dtype} with "
                         f"non-finite or non-numeric values")
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(f"need one label per input: got {len(x)} inputs and labels of shape "
                         f"{y.shape}")
    if not np.issubdtype(y.dtype, np.integer) or int(y.min()) < 0:
        raise ValueError(f"labels must be non-negative integer classes, got dtype {y.dtype}, "
                         f"min {y.min()}")
    return np.ascontiguousarray(x, dtype=np.float32), np.ascontiguousarray(y, dtype=np.int64)


@contextmanager
def _isolated_rng(device: torch.device, seed: int) -> Iterator[None]:
    """Seed a private RNG stream for the block; the caller's stream resumes unchanged after."""
    import torch

    cuda = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        yield


def _trainable_weights(model: torch.nn.Module) -> list[torch.Tensor]:
    """The weight tensors (two or more dimensions), with gradients on and none accumulated."""
    for parameter in model.parameters():
        parameter.requires_grad_(True)
        parameter.grad = None
    return [p for p in model.parameters() if p.dim() >= 2]


def _logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    import torch

    logits = model(x)
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.shape[0] != len(x):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"the module must map a batch of {len(x)} to (batch, classes) logits, "
                         f"got {shape}")
    return logits


def _torch_types(type_names: tuple[str, ...]) -> tuple[type[torch.nn.Module], ...]:
    import torch

    return tuple(getattr(torch.nn, name) for name in type_names)


def _replace_with_identity(model: torch.nn.Module, type_names: tuple[str, ...]) -> None:
    import torch

    # Collected first: swapping children while walking the module tree would skip some.
    targets = [(parent, name) for parent in model.modules()
               for name, child in parent.named_children()
               if isinstance(child, _torch_types(type_names))]
    for parent, name in targets:
        setattr(parent, name, torch.nn.Identity())


for _declaration in (ProxyDeclaration("synflow", _synflow, _SYNFLOW_LOWEST),
                     ProxyDeclaration("naswot", _naswot, _NASWOT_LOWEST),
                     ProxyDeclaration("grad_norm", _grad_norm)):
    register_proxy(_declaration)
