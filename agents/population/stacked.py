"""P pods' networks, observation statistics and Adam states as tensors with a leading pod axis.

Every layer of the P networks is one batched operation: a ``Linear`` of pod ``p`` becomes a slice of a
``(P, out, in)`` weight, and ``x @ W^T + b`` over all pods is one ``torch.baddbmm``. Why batched
matmuls written out, not ``torch.func.stack_module_state`` + ``functional_call`` + ``vmap``: both run
the same batched kernels (vmap turns each ``linear`` into a ``bmm``), but vmap adds its batching-rule
dispatch to every op of every call, the hot path of a small network, and the written-out form is
plain tensor code that CUDA graphs capture as it is. It follows :class:`~agents.networks.
PerAssetActorCritic` op for op (the packed training form and the deep-encoder form), so a pod's
outputs equal its own network's to float rounding (tests/test_population.py).

- :class:`StackedNets`: the parameters (``(P, *shape)`` leaves, in the network's
  ``named_parameters`` order, which is also the optimizer's), the forward passes, slot copies in/out;
- :class:`StackedNorm`: one :class:`~agents.normalize.ObsNormalizer` per pod (the same parallel
  update, the same normalization, per-pod sample counts);
- :func:`clip_grad_norms`: ``clip_grad_norm_`` per pod (each pod's global norm over its own tensors);
- :class:`StackedAdam`: Adam (torch's update rule, ``eps=1e-5`` as :func:`agents.training.
  make_optimizer`) with a per-pod learning rate and step count, and a mask: a masked pod's
  parameters, moments and step count stay exactly as they were; ``decoupled``: AdamW (the direct
  learner's), with a per-pod weight decay.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import Tensor

from agents.networks import NetworkConfig, PerAssetActorCritic
from agents.normalize import ObsNormalizer
from agents.training import ADAM_EPS
from envs.observation import NUM_GLOBAL, asset_width

ADAM_BETAS = (0.9, 0.999)  # torch.optim.Adam's default, which the learners keep


def _linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``x @ W^T + b`` for every pod: ``x (P, M, in)``, ``weight (P, out, in)``, ``bias (P, out)``."""
    return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


def _pod_view(mask: Tensor, like: Tensor) -> Tensor:
    """``mask (P,)`` shaped to broadcast over ``like (P, ...)``."""
    return mask.view(-1, *([1] * (like.dim() - 1)))


def float64_ok(device: torch.device) -> bool:
    """Whether ``device`` has float64 tensors (MPS has none: counts and Adam's corrections fall back to
    float32 there)."""
    return device.type != "mps"


class StackedNets:
    """``P`` :class:`PerAssetActorCritic` of one :class:`NetworkConfig` as stacked leaf tensors."""

    def __init__(self, config: NetworkConfig, num_pods: int, device: str | torch.device) -> None:
        self.config = config
        self.num_pods = int(num_pods)
        self.device = torch.device(device)
        # A template of the shapes and names, and the weight-free ``pack`` (it reads only the config).
        self.template = PerAssetActorCritic(config).to(self.device)
        self.names = [name for name, _ in self.template.named_parameters()]
        self.params: dict[str, Tensor] = {
            name: torch.zeros(self.num_pods, *p.shape, device=self.device).requires_grad_()
            for name, p in self.template.named_parameters()
        }
        self.encoder_layers = [
            i for i, layer in enumerate(self.template.encoder) if isinstance(layer, torch.nn.Linear)
        ]

    def tensors(self) -> list[Tensor]:
        """The parameters in the optimizer's order."""
        return [self.params[name] for name in self.names]

    # --- slots ------------------------------------------------------------------------------------
    @torch.no_grad()
    def load(self, slot: int, net: PerAssetActorCritic) -> None:
        """Copy ``net``'s parameters into row ``slot`` (in place: captured graphs stay valid)."""
        for name, value in net.named_parameters():
            self.params[name][slot].copy_(value.detach())

    def state_dict(self, slot: int) -> dict[str, Tensor]:
        """Row ``slot`` as the network's ``state_dict`` (fresh tensors)."""
        return {name: t[slot].detach().clone() for name, t in self.params.items()}

    def select(self, slots: Sequence[int]) -> StackedNets:
        """The pods ``slots`` as their own (detached) stack: e.g. the ones to score."""
        out = StackedNets.__new__(StackedNets)
        out.config, out.device, out.template = self.config, self.device, self.template
        out.names, out.encoder_layers, out.num_pods = self.names, self.encoder_layers, len(slots)
        index = torch.as_tensor(list(slots), dtype=torch.long, device=self.device)
        out.params = {name: t.detach().index_select(0, index) for name, t in self.params.items()}
        return out

    # --- forward passes -----------------------------------------------------------------------------
    def std(self) -> Tensor:
        """``(P, A + 1)``: :meth:`PerAssetActorCritic.std` of every pod."""
        log_std = self.params["log_std"]
        a = self.config.num_assets
        return torch.cat([log_std[:, :1].expand(-1, a), log_std[:, 1:]], dim=1).exp()

    def pack(self, obs: Tensor) -> tuple[Tensor, ...]:
        """:meth:`PerAssetActorCritic.pack` of normalized observations ``(P, M, obs_dim)``, each part
        ``(P, M, ...)``."""
        p, m = obs.shape[:2]
        parts = self.template.pack(obs.reshape(p * m, obs.shape[2]))
        return tuple(part.reshape(p, m, *part.shape[1:]) for part in parts)

    def _critic(self, ctx: Tensor) -> Tensor:
        w = self.params
        hidden = torch.tanh(_linear(ctx, w["critic.0.weight"], w["critic.0.bias"]))
        return _linear(hidden, w["critic.2.weight"], w["critic.2.bias"]).squeeze(-1)

    def _context(self, pooled: Tensor) -> Tensor:
        return torch.tanh(_linear(pooled, self.params["context.0.weight"], self.params["context.0.bias"]))

    def _packed_context(self, pooled: Tensor) -> Tensor:
        """The context of the linear encoder from ``pack``'s pooled inputs (weight-free parts)."""
        x = asset_width(self.config.num_features)
        w, b = self.params["encoder.0.weight"], self.params["encoder.0.bias"]
        mean_in, held_in, weight_sum, glob = pooled.split([x, x, 1, NUM_GLOBAL], dim=2)
        mean_emb = _linear(mean_in, w, b)  # mean_a h_a
        held = torch.bmm(held_in, w.transpose(1, 2)) + weight_sum * b.unsqueeze(1)  # sum_a w_a h_a
        return self._context(torch.cat([mean_emb, held, glob], dim=2))

    def forward_packed(self, *packed: Tensor) -> tuple[Tensor, Tensor]:
        """``(mean logits (P, M, A + 1), value (P, M))`` from :meth:`pack`'s output."""
        if self.config.asset_layers != 0:
            return self.forward(*packed)
        assets, pooled = packed  # (P, M, X, A), (P, M, 2X + 1 + NUM_GLOBAL)
        p, m, x, a = assets.shape
        w, b = self.params["encoder.0.weight"], self.params["encoder.0.bias"]
        ctx = self._packed_context(pooled)
        readout = _linear(ctx, self.params["actor_readout.weight"], self.params["actor_readout.bias"])
        # q . (W x_a + b) = (W^T q) . x_a + q . b, every asset of every sample in one bmm
        folded = torch.bmm(readout, w)  # (P, M, X)
        logits = torch.bmm(folded.reshape(p * m, 1, x), assets.reshape(p * m, x, a)).reshape(p, m, a)
        logits = logits + torch.bmm(readout, b.unsqueeze(2))
        cash = _linear(ctx, self.params["actor_cash.weight"], self.params["actor_cash.bias"])
        return torch.cat([logits, cash], dim=2), self._critic(ctx)

    def value_packed(self, *packed: Tensor) -> Tensor:
        """``(P, M)``: only the critic's part of :meth:`forward_packed`."""
        if self.config.asset_layers != 0:
            return self.forward(*packed)[1]
        return self._critic(self._packed_context(packed[1]))

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`PerAssetActorCritic.forward` of a deep encoder (``asset_layers >= 1``) on normalized
        observations ``(P, M, obs_dim)``."""
        cfg = self.config
        p, m, _ = obs.shape
        a, x = cfg.num_assets, asset_width(cfg.num_features)
        glob = obs[:, :, :NUM_GLOBAL]
        per_asset = obs[:, :, NUM_GLOBAL:].reshape(p, m, a, x)
        weight = per_asset[..., :1]  # (P, M, A, 1)
        h = per_asset.reshape(p, m * a, x)
        for i in self.encoder_layers:
            h = torch.relu(_linear(h, self.params[f"encoder.{i}.weight"], self.params[f"encoder.{i}.bias"]))
        emb = h.reshape(p, m, a, cfg.embed)
        held = (weight * emb).sum(dim=2)
        ctx = self._context(torch.cat([emb.sum(dim=2) * (1.0 / a), held, glob], dim=2))
        readout = _linear(ctx, self.params["actor_readout.weight"], self.params["actor_readout.bias"])
        logits = (emb * readout.unsqueeze(2)).sum(dim=-1)
        cash = _linear(ctx, self.params["actor_cash.weight"], self.params["actor_cash.bias"])
        return torch.cat([logits, cash], dim=2), self._critic(ctx)


class StackedNorm:
    """One :class:`ObsNormalizer` per pod: statistics ``(P, ...)``, counts ``(P,)``."""

    def __init__(self, num_pods: int, num_features: int, device: str | torch.device) -> None:
        self.device = torch.device(device)
        x = asset_width(num_features)
        z = {"device": self.device}
        self.mean_global = torch.zeros(num_pods, NUM_GLOBAL, **z)
        self.var_global = torch.ones(num_pods, NUM_GLOBAL, **z)
        self.mean_asset = torch.zeros(num_pods, x, **z)
        self.var_asset = torch.ones(num_pods, x, **z)
        # ObsNormalizer keeps its count as a host float64; here it lives on the device (no host sync).
        self.count_dtype = torch.float64 if float64_ok(self.device) else torch.float32
        self.count = torch.zeros(num_pods, dtype=self.count_dtype, **z)
        default = ObsNormalizer(NUM_GLOBAL, x)
        self.clip, self.eps = default.clip, default.eps

    @torch.no_grad()
    def load(self, slot: int, norm: ObsNormalizer) -> None:
        if norm.clip != self.clip or norm.eps != self.eps:
            raise ValueError(
                f"normalizer clip/eps ({norm.clip}, {norm.eps}) differ from ({self.clip}, {self.eps})"
            )
        for name in ("mean_global", "var_global", "mean_asset", "var_asset"):
            getattr(self, name)[slot].copy_(getattr(norm, name))
        self.count[slot] = norm.count

    def select(self, index: Tensor) -> StackedNorm:
        """The rows ``index`` as their own (copied) statistics."""
        out = StackedNorm.__new__(StackedNorm)
        out.device, out.count_dtype, out.clip, out.eps = self.device, self.count_dtype, self.clip, self.eps
        for name in ("mean_global", "var_global", "mean_asset", "var_asset", "count"):
            setattr(out, name, getattr(self, name).index_select(0, index))
        return out

    @torch.no_grad()
    def export(self, slot: int, norm: ObsNormalizer) -> None:
        """Write row ``slot`` into ``norm``."""
        for name in ("mean_global", "var_global", "mean_asset", "var_asset"):
            getattr(norm, name).copy_(getattr(self, name)[slot])
        norm.count = float(self.count[slot])

    def _tiled(self, num_assets: int) -> tuple[Tensor, Tensor]:
        mean = torch.cat([self.mean_global, self.mean_asset.repeat(1, num_assets)], dim=1)
        scale = torch.cat(
            [
                torch.sqrt(self.var_global + self.eps),
                torch.sqrt(self.var_asset + self.eps).repeat(1, num_assets),
            ],
            dim=1,
        )
        return mean.unsqueeze(1), scale.unsqueeze(1)

    def normalize(self, obs: Tensor) -> Tensor:
        """:meth:`ObsNormalizer.normalize` of ``obs (P, M, obs_dim)``, each pod with its statistics."""
        num_assets = (obs.shape[2] - NUM_GLOBAL) // self.mean_asset.shape[1]
        mean, scale = self._tiled(num_assets)
        return torch.sub(obs, mean).div_(scale).clamp_(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, obs: Tensor, active: Tensor) -> None:
        """:meth:`ObsNormalizer.update` of every pod with its ``obs (P, N, obs_dim)``; pods where
        ``active (P,)`` is False keep their statistics and count."""
        p, n, width = obs.shape
        g, x = NUM_GLOBAL, self.mean_asset.shape[1]
        a = (width - g) // x
        first = (self.count == 0).unsqueeze(1)  # the first batch is shifted by its own mean
        cols = obs.sum(dim=1) / n
        shift_g = torch.where(first, cols[:, :g], self.mean_global)
        shift_a = torch.where(first, cols[:, g:].reshape(p, a, x).mean(dim=1), self.mean_asset)
        d = obs - torch.cat([shift_g, shift_a.repeat(1, a)], dim=1).unsqueeze(1)
        s1 = d.sum(dim=1)
        s2 = d.square_().sum(dim=1)
        old = self.count
        total = old + n
        # The factors ObsNormalizer computes in float64 and applies in float32.
        keep = (old * n / total).to(torch.float32).unsqueeze(1)
        step = (n / total).to(torch.float32).unsqueeze(1)
        old32, total32 = old.to(torch.float32).unsqueeze(1), total.to(torch.float32).unsqueeze(1)
        groups = (
            (self.mean_global, self.var_global, shift_g, s1[:, :g] / n, s2[:, :g] / n),
            (
                self.mean_asset,
                self.var_asset,
                shift_a,
                s1[:, g:].reshape(p, a, x).sum(dim=1) / (n * a),
                s2[:, g:].reshape(p, a, x).sum(dim=1) / (n * a),
            ),
        )
        on = active.unsqueeze(1)
        for mean, var, shift, m1, m2_batch in groups:
            b_mean, b_var = shift + m1, (m2_batch - m1.square()).clamp_min(0.0)
            delta = b_mean - mean
            new_mean = mean + delta * step
            m2 = var * old32 + b_var * float(n) + delta.square() * keep
            new_var = m2 / total32
            mean.copy_(torch.where(on, new_mean, mean))
            var.copy_(torch.where(on, new_var, var))
        self.count.copy_(torch.where(active, total, old))


def clip_grad_norms(grads: Sequence[Tensor], max_norm: Tensor) -> list[Tensor]:
    """``torch.nn.utils.clip_grad_norm_`` per pod: each pod's grads scaled so that their global 2-norm
    is at most ``max_norm (P,)``."""
    num_pods = grads[0].shape[0]
    norms = torch.stack([g.reshape(num_pods, -1).norm(dim=1) for g in grads])  # (params, P)
    total = torch.linalg.vector_norm(norms, dim=0)
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    return [g * _pod_view(coef, g) for g in grads]


class StackedAdam:
    """Adam over :class:`StackedNets`, per-pod learning rate and step count, masked pods untouched.

    Written out because torch's Adam takes one learning rate per parameter group and one step count
    per tensor, and a population needs both per row. The rule is torch's (``lerp`` of the first
    moment, ``bias_correction2`` under the square root, ``eps`` added after it); the bias corrections
    are computed in float64 (where the device has it), as torch's fused kernel does.
    """

    def __init__(self, nets: StackedNets, decoupled: bool = False) -> None:
        self.nets = nets
        self.decoupled = decoupled  # AdamW: torch.optim.AdamW's decoupled weight decay
        self.exp_avg = [torch.zeros_like(t, requires_grad=False) for t in nets.tensors()]
        self.exp_avg_sq = [torch.zeros_like(t, requires_grad=False) for t in nets.tensors()]
        self.step = torch.zeros(nets.num_pods, device=nets.device)  # (P,) float32, as torch keeps it
        self.beta1, self.beta2 = ADAM_BETAS
        self.eps = ADAM_EPS
        self.wide = torch.float64 if float64_ok(nets.device) else torch.float32

    @torch.no_grad()
    def load(self, slot: int, state: dict | None) -> None:
        """Row ``slot`` from a ``torch.optim.Adam`` ``state_dict`` (None: a fresh optimizer)."""
        if state is None:
            for m, v in zip(self.exp_avg, self.exp_avg_sq, strict=True):
                m[slot].zero_()
                v[slot].zero_()
            self.step[slot] = 0.0
            return
        for group in state.get("param_groups", []):
            betas, eps = tuple(group.get("betas", ADAM_BETAS)), group.get("eps", ADAM_EPS)
            decay = group.get("weight_decay", 0) and not self.decoupled
            if betas != ADAM_BETAS or eps != ADAM_EPS or decay or group.get("amsgrad"):
                raise ValueError(f"optimizer state has betas={betas}, eps={eps}: not the learners' Adam")
        per_param = state["state"]
        steps = {float(per_param[i]["step"]) for i in per_param if "step" in per_param[i]}
        if len(steps) > 1:
            raise ValueError(f"optimizer state has different step counts per tensor: {sorted(steps)}")
        for i, (m, v) in enumerate(zip(self.exp_avg, self.exp_avg_sq, strict=True)):
            entry = per_param.get(i)
            if entry is None:
                m[slot].zero_()
                v[slot].zero_()
            else:
                m[slot].copy_(entry["exp_avg"])
                v[slot].copy_(entry["exp_avg_sq"])
        self.step[slot] = steps.pop() if steps else 0.0

    def state_dict(self, slot: int, param_groups: list[dict]) -> dict:
        """Row ``slot`` as a ``torch.optim.Adam`` ``state_dict`` (``param_groups`` from a fresh Adam)."""
        step = float(self.step[slot])
        state = {}
        if step > 0:
            device = self.nets.device
            state = {
                i: {
                    "step": torch.tensor(step, dtype=torch.float32, device=device),
                    "exp_avg": m[slot].clone(),
                    "exp_avg_sq": v[slot].clone(),
                }
                for i, (m, v) in enumerate(zip(self.exp_avg, self.exp_avg_sq, strict=True))
            }
        return {"state": state, "param_groups": param_groups}

    @torch.no_grad()
    def update(
        self, grads: Sequence[Tensor | None], lr: Tensor, active: Tensor, weight_decay: Tensor | None = None
    ) -> None:
        """One Adam step of the ``active (P,)`` pods with learning rates ``lr (P,)`` (and, decoupled,
        ``weight_decay (P,)``); a tensor whose gradient is None is skipped, as torch's optimizers
        skip it (no decay either)."""
        step = self.step + active.to(self.step.dtype)
        wide = step.to(self.wide)
        # Inactive pods may sit at step 0 (a division by zero below): their results are discarded.
        step_size = (lr.to(self.wide) / (1.0 - self.beta1**wide)).to(torch.float32)
        bc2_sqrt = torch.sqrt(1.0 - self.beta2**wide).to(torch.float32)
        decay = None if weight_decay is None else 1.0 - lr * weight_decay
        for param, grad, m, v in zip(self.nets.tensors(), grads, self.exp_avg, self.exp_avg_sq, strict=True):
            if grad is None:
                continue
            on = _pod_view(active, m)
            new_m = torch.lerp(m, grad, 1.0 - self.beta1)
            new_v = torch.addcmul(v * self.beta2, grad, grad, value=1.0 - self.beta2)
            denom = new_v.sqrt() / _pod_view(bc2_sqrt, v) + self.eps
            base = param if decay is None else param * _pod_view(decay, param)
            new_p = base - _pod_view(step_size, m) * new_m / denom
            m.copy_(torch.where(on, new_m, m))
            v.copy_(torch.where(on, new_v, v))
            param.copy_(torch.where(on, new_p, param))
        self.step.copy_(step)


def fused_adam_param_groups(nets: StackedNets, lr: float) -> list[dict]:
    """The ``param_groups`` of the learners' Adam (:func:`agents.training.make_optimizer`) over one
    pod's network, for :meth:`StackedAdam.state_dict`."""
    groups = _adam_param_groups(str(nets.device), len(nets.names))
    return [{**group, "params": list(group["params"]), "lr": lr} for group in groups]


@functools.cache  # (building an optimizer costs milliseconds; a population exports every pod, every round)
def _adam_param_groups(device: str, num_params: int) -> tuple[dict, ...]:
    fused = torch.device(device).type in ("cpu", "cuda")
    probe = [torch.zeros(1, device=device, requires_grad=True) for _ in range(num_params)]
    optimizer = torch.optim.Adam(probe, lr=0.0, eps=ADAM_EPS, fused=fused or None)
    return tuple(optimizer.state_dict()["param_groups"])


def finite_rows(nets: StackedNets) -> Tensor:
    """``(P,)`` bool: pods whose parameters are all finite."""
    ok = torch.ones(nets.num_pods, dtype=torch.bool, device=nets.device)
    for t in nets.tensors():
        ok &= torch.isfinite(t.detach().reshape(nets.num_pods, -1)).all(dim=1)
    return ok
