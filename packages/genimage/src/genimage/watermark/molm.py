"""MOLM: Mixture of LoRA Markers — key bits route LoRA adapters inside the generator.

After "Mixture of LoRA Markers" (MOLM, ICLR 2026). Selected linear layers of the generator
(by default the attention output and MLP output projections of every transformer block) get,
for each of the ``L`` key bits, two rank-``r`` LoRA adapters; a key ``k in {0, 1}^L`` switches on
adapter ``k_b`` of bit ``b``: ``W x + (alpha / L) sum_b B_{b, k_b} A_{b, k_b} x``. Adapters and an
extractor network (the HiDDeN decoder architecture) are trained jointly over random keys, so a
new key needs no retraining: the loss is the extractor's BCE on the one-step clean prediction
``x1 = x_t + (1 - t) v_k(x_t, t)`` on the linear path (a VP run draws ``x_t`` on its own path and converts its
noise prediction to the clean one and to the velocity) through a random distortion, plus ``fidelity *
|v_k - v_base|^2``, which keeps the marked generator close to the original. The base weights are
frozen. Training happens in three phases:

1. Joint (:func:`train_molm`): on one-step predictions from points on the data path (unmarked samples of the
   base model serve as data), cheap but not what the detector reads. In a latent run the path lives in the
   VAE's latent space and the extractor reads the VAE decoding of the one-step prediction.
2. Through the sampler (:func:`train_through_sampler`, ``sampler_steps``): adapters and extractor together on
   fully sampled images, back-propagating through the sampler's last two steps only (truncated
   back-propagation: the whole sampler is too costly here), with a fidelity term against the unmarked image
   of the same noise.
3. Extractor (:meth:`MOLMScheme.finetune`): the adapters frozen, the extractor alone on fully sampled images,
   each drawn with its own random key through the same sampler the harness uses, keeping the weights that read
   further such images best.

Key routing: the paper splits the key into segments of ``log2 P`` bits, each choosing one of ``P``
adapters of one block (by default in the VAE decoder's ResNet blocks). ``routing="segment"`` does that on
the target layers of the velocity network (so it works the same way on pixel and latent runs);
``routing="bit"`` (the default here) instead gives every bit its own pair of adapters in every target
layer, which measured better on photos (see the README).
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from gencore.checks import check_choice, check_int
from gencore.errors import ConfigError
from gencore.paths import AffineGaussianPath, LinearSchedule
from gencore.paths.base import PREDICTIONS
from gencore.rng import randn_like_with, seeded_init
from genimage.watermark.guidance import GaussianNull, decoder_detection
from genimage.watermark.hidden import HiddenConfig, HiddenDecoder, noise_layer
from genimage.watermark.image_schemes import generate_batched
from genimage.watermark.keys import derive_seed, new_key
from genimage.watermark.metrics import bit_accuracy

__all__ = [
    "DEFAULT_TARGETS",
    "ROUTINGS",
    "MOLMScheme",
    "RoutedLoRALinear",
    "attach_markers",
    "sample_marked",
    "train_extractor",
    "train_molm",
    "train_through_sampler",
]

DEFAULT_TARGETS = r"blocks\.\d+\.(proj|mlp\.2)$"


ROUTINGS = ("bit", "segment")
# default steps of the three phases (MOLMScheme.build, the CLI and the benchmark); 2,400 joint steps: at 1,200 the
# joint phase had not converged on photos (genimage README)
JOINT_STEPS, SAMPLER_STEPS, FINETUNE_STEPS = 2400, 150, 300
# fidelity weights of the joint phase (on the velocity) and of the phase through the sampler (on the image)
JOINT_FIDELITY, SAMPLER_FIDELITY = 0.1, 1.0


class RoutedLoRALinear(nn.Module):
    """``base(x) + (alpha / G) sum_g B[g, s_g] A[g, s_g] x``, with keys set by :meth:`route` (``None``: base only).

    ``groups[g]`` lists the key bits that group ``g`` reads as the binary number ``s_g`` (first bit lowest),
    which picks one of the group's ``2^k`` adapters. ``[[0], [1], ..., [L - 1]]`` gives every bit its own pair
    of adapters (``bit`` routing); one group of ``k`` bits gives the paper's one-of-``2^k`` (``segment``).
    """

    def __init__(
        self,
        base: nn.Linear,
        groups: list[list[int]],
        rank: int = 4,
        alpha: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.base, self.rank, self.alpha = base, rank, alpha
        k = max(len(g) for g in groups)
        index, weight = torch.zeros(len(groups), k, dtype=torch.long), torch.zeros(len(groups), k, dtype=torch.long)
        for i, group in enumerate(groups):
            index[i, : len(group)] = torch.tensor(group)
            weight[i, : len(group)] = 2 ** torch.arange(len(group))
        where = {"device": base.weight.device, "dtype": base.weight.dtype}  # drawn on the CPU, kept beside the base
        self.register_buffer("bit_index", index.to(where["device"]), persistent=False)
        self.register_buffer("bit_weight", weight.to(where["device"]), persistent=False)
        a = torch.randn(len(groups), 2**k, rank, base.in_features, generator=generator) / base.in_features**0.5
        self.A = nn.Parameter(a.to(**where))
        self.B = nn.Parameter(torch.zeros(len(groups), 2**k, base.out_features, rank, **where))
        self.keys: torch.Tensor | None = None

    def route(self, keys: torch.Tensor | None) -> None:
        """``keys: [N, L]`` bits (or None): image ``n`` uses adapter ``s_g`` of every group ``g``."""
        if keys is None:
            self.keys = None
            return
        self.keys = (keys.to(self.A.device).long()[:, self.bit_index] * self.bit_weight).sum(-1)  # [N, G]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        if self.keys is None:
            return out
        idx = torch.arange(self.A.shape[0], device=self.A.device)
        a = self.A[idx, self.keys]  # [N, G, r, in]
        b = self.B[idx, self.keys]  # [N, G, out, r]
        h = torch.einsum("n...i,nlri->n...lr", x, a)
        return out + (self.alpha / self.A.shape[0]) * torch.einsum("n...lr,nlor->n...o", h, b)


def attach_markers(
    model: nn.Module,
    bits: int,
    *,
    routing: str = "bit",
    targets: str = DEFAULT_TARGETS,
    rank: int = 4,
    alpha: float = 8.0,
    generator: torch.Generator | None = None,
) -> list[str]:
    """Replace the linear layers whose names match ``targets`` by :class:`RoutedLoRALinear` (in place) and
    return their names; the adapters' ``A`` are drawn from ``generator`` (None: the global generator) in the
    order of the layers.

    ``routing="bit"``: every bit picks one of its own two adapters in every layer. ``"segment"`` (the paper's):
    the key is cut into consecutive segments of ``k = ceil(bits / layers)`` bits, and segment ``l`` picks one of
    the ``2^k`` adapters of layer ``l`` (layers past the last segment get none).
    """
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and re.search(targets, n)]
    if not names:
        raise ConfigError(f"no linear layer of the model matches the MOLM target pattern {targets!r}.")
    if routing == "bit":
        layer_groups = [[[b] for b in range(bits)]] * len(names)
    elif routing == "segment":
        k = -(-bits // len(names))
        if k > 8:
            raise ConfigError(
                f"segment routing would put {k} key bits on each of the model's {len(names)} target layers "
                f"(2^{k} adapters each); use at most 8 bits per layer (fewer bits, or bit routing)."
            )
        layer_groups = [[list(range(s, min(s + k, bits)))] for s in range(0, bits, k)]
        names = names[: len(layer_groups)]
    else:
        raise ConfigError(f"MOLM routing must be one of {', '.join(ROUTINGS)}, got {routing!r}.")
    for name, groups in zip(names, layer_groups):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, RoutedLoRALinear(getattr(parent, child), groups, rank, alpha, generator))
    return names


def _markers(model: nn.Module) -> list[RoutedLoRALinear]:
    return [m for m in model.modules() if isinstance(m, RoutedLoRALinear)]


def _trainable_adapters(model: nn.Module) -> list[nn.Parameter]:
    """Freeze ``model`` but its markers' adapters, and return those (``A`` and ``B`` of every marker)."""
    model.requires_grad_(False)
    lora = [p for m in _markers(model) for p in (m.A, m.B)]
    for p in lora:
        p.requires_grad_(True)
    return lora


def route(model: nn.Module, keys: torch.Tensor | None) -> None:
    for m in _markers(model):
        m.route(keys)


def sample_marked(gen, model: nn.Module, noise: torch.Tensor, keys: torch.Tensor, batch: int = 64) -> torch.Tensor:
    """Fully sampled images from ``noise`` (on ``gen``'s sampler), image ``i`` with ``keys[i]`` routing the
    adapters; the adapters are switched off afterwards."""
    out = []
    try:
        for i in range(0, noise.shape[0], batch):
            route(model, keys[i : i + batch])
            out.append(gen.generate(noise[i : i + batch]))
    finally:
        route(model, None)
    return torch.cat(out)


def train_extractor(
    extractor: nn.Module,
    images: torch.Tensor,
    keys: torch.Tensor,
    held_images: torch.Tensor,
    held_keys: torch.Tensor,
    *,
    steps: int,
    batch_size: int = 32,
    lr: float = 1e-3,
    check_every: int = 25,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, float]:
    """Train ``extractor`` alone (in place) to read ``keys[i]`` from ``images[i]`` through the random
    distortions of the joint phase, and keep the weights (the starting ones included) that read the held-out
    images best, checked every ``check_every`` steps: the phase can over-fit, and then it changes nothing.
    Returns the held-out bit accuracy before and after, and the step of the weights kept."""
    steps = check_int(steps, "MOLM's extractor steps", low=0)
    check_every = check_int(check_every, "check_every", low=1)
    device = next(extractor.parameters()).device
    images, target = images.to(device), keys.to(device=device, dtype=torch.float32)
    held_images, held_keys = held_images.to(device), held_keys.to(device)

    def held_accuracy() -> float:
        with torch.no_grad():
            return bit_accuracy(extractor(held_images) > 0, held_keys)

    extractor.eval()
    before = best = held_accuracy()
    best_step, best_state = 0, {k: v.clone() for k, v in extractor.state_dict().items()}
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(extractor.parameters(), lr=lr)
    for step in tqdm(range(1, steps + 1), disable=not progress, desc="train MOLM extractor"):
        extractor.train()
        idx = torch.randint(0, images.shape[0], (batch_size,), generator=g).to(device)
        kind = int(torch.randint(0, 6, (), generator=g))
        logits = extractor(noise_layer(images[idx], kind, g).clamp(-1, 1))
        loss = F.binary_cross_entropy_with_logits(logits, target[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % check_every == 0 or step == steps:
            extractor.eval()
            acc = held_accuracy()
            if acc > best:
                best, best_step = acc, step
                best_state = {k: v.clone() for k, v in extractor.state_dict().items()}
    extractor.load_state_dict(best_state)
    extractor.eval()
    return {"held_out_bit_accuracy_before": before, "held_out_bit_accuracy_after": best, "step_kept": best_step}


def train_molm(
    model: nn.Module,
    states: torch.Tensor,
    *,
    bits: int,
    steps: int = JOINT_STEPS,
    batch_size: int = 32,
    lr: float = 3e-3,
    fidelity: float = JOINT_FIDELITY,
    seed: int = 0,
    progress: bool = True,
    to_image=None,
    path: AffineGaussianPath | None = None,
    prediction: str = "velocity",
    t_end: float = 1.0,
) -> HiddenDecoder:
    """Train the markers already attached to ``model`` and a fresh extractor; returns the extractor.

    ``states``: clean ODE states at ``t = 1`` (images, or latents of a latent run) on the model's device, where
    the extractor is trained; ``to_image`` maps states to images differentiably (default the identity) for the
    extractor. ``path``, ``prediction`` and ``t_end``: the run's probability path (default the linear one), what
    ``model`` predicts (``"velocity"``, or a VP run's ``"noise"``) and its last time; the noisy points are drawn
    on that path at ``t`` in ``[0.3, 1) * t_end``, the network's output is converted to a velocity (fidelity) and to
    the clean prediction the extractor reads. Initial weights and draws do not depend on the device.
    """
    to_image = to_image or (lambda x: x)
    path = path or AffineGaussianPath(LinearSchedule())
    check_choice(prediction, PREDICTIONS, "prediction")
    steps = check_int(steps, "MOLM's joint training steps", low=1)
    device = states.device
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        channels = to_image(states[:1]).shape[1]
    with seeded_init(seed):
        extractor = HiddenDecoder(HiddenConfig(channels=channels, message_bits=bits)).to(device)
    lora = _trainable_adapters(model)
    opt = torch.optim.Adam([*lora, *extractor.parameters()], lr=lr)
    for _ in tqdm(range(steps), disable=not progress, desc="train MOLM"):
        x1 = states[torch.randint(0, states.shape[0], (batch_size,), generator=g).to(device)]
        x0 = randn_like_with(x1, g)
        t = ((0.3 + 0.7 * torch.rand(batch_size, generator=g)) * t_end).to(device)
        xt = path.sample(x0, x1, t).x_t
        keys = torch.randint(0, 2, (batch_size, bits), generator=g).to(device)
        with torch.no_grad():
            route(model, None)
            v_base = path.convert(model(xt, t), xt, t, prediction, "velocity")
        route(model, keys)
        out = model(xt, t)
        v = path.convert(out, xt, t, prediction, "velocity")
        pred = to_image(path.convert(out, xt, t, prediction, "data")).clamp(-1, 1)
        kind = int(torch.randint(0, 6, (), generator=g))
        logits = extractor(noise_layer(pred, kind, g).clamp(-1, 1))
        loss = F.binary_cross_entropy_with_logits(logits, keys.float()) + fidelity * (v - v_base).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    route(model, None)
    for p in lora:
        p.requires_grad_(False)
    extractor.eval()
    return extractor


def train_through_sampler(
    gen,
    model: nn.Module,
    extractor: nn.Module,
    *,
    bits: int,
    steps: int,
    batch_size: int = 16,
    last_steps: int = 2,
    lr: float = 1e-3,
    fidelity: float = SAMPLER_FIDELITY,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, float]:
    """Train the markers attached to ``model`` and ``extractor`` together (in place) on fully sampled images.

    Every step draws fresh noise and random keys, samples the marked images on ``gen``'s own grid and solver
    with gradients through its last ``last_steps`` solver steps (and the VAE decoder of a latent run; the earlier
    steps run without them, see :meth:`~genimage.watermark.generators.FlowGenerator.generate_with_grad`), and
    minimises the extractor's BCE through a random distortion plus ``fidelity`` times the mean squared
    difference from the unmarked image of the same noise. Returns the mean BCE and squared difference of the
    first and last tenth of the steps.
    """
    steps = check_int(steps, "MOLM's steps through the sampler", low=1)
    device = gen.device
    g = torch.Generator().manual_seed(seed)
    lora = _trainable_adapters(model)
    opt = torch.optim.Adam([*lora, *extractor.parameters()], lr=lr)
    history = []
    extractor.train()
    try:
        for _ in tqdm(range(steps), disable=not progress, desc="train MOLM through the sampler"):
            noise = torch.randn(batch_size, *gen.noise_shape, generator=g)
            keys = torch.randint(0, 2, (batch_size, bits), generator=g)
            route(model, None)
            plain = gen.generate(noise).to(device)
            route(model, keys)
            marked = gen.generate_with_grad(noise, last_steps)
            kind = int(torch.randint(0, 6, (), generator=g))
            image = marked.clamp(-1, 1)
            logits = extractor(noise_layer(image, kind, g).clamp(-1, 1))
            bce = F.binary_cross_entropy_with_logits(logits, keys.to(device=device, dtype=torch.float32))
            mse = (image - plain).pow(2).mean()
            opt.zero_grad()
            (bce + fidelity * mse).backward()
            opt.step()
            history.append((bce.item(), mse.item()))
    finally:
        route(model, None)
        for p in lora:
            p.requires_grad_(False)
        extractor.eval()
    tenth = max(1, steps // 10)
    first, last = torch.tensor(history[:tenth]).mean(0), torch.tensor(history[-tenth:]).mean(0)
    return {"bce_first": float(first[0]), "bce_last": float(last[0]), "mse_first": float(first[1]),
            "mse_last": float(last[1])}  # fmt: skip


class MOLMScheme:
    """MOLM in the harness: marked images are sampled with the key's adapters switched on."""

    name = "molm"
    multibit = True
    detect_nfe = 0

    def __init__(
        self,
        model: nn.Module,
        extractor: HiddenDecoder,
        message: torch.Tensor,
        null_images: torch.Tensor | None,
        *,
        null: GaussianNull | None = None,
    ):
        """``null_images``: held-out unmarked images the null is fitted on, or None with a fitted ``null`` (as a
        saved scheme carries; such a scheme cannot be trained further, as nothing to refit the null on is kept)."""
        self.model, self.extractor, self.message, self.null_images = model, extractor, message, null_images
        if null is None:
            self._fit_null()
        else:
            self.null = null

    def _fit_null(self) -> None:
        unmarked = decoder_detection(self.extractor, self.null_images, self.message, GaussianNull(torch.zeros(2)))
        self.null = GaussianNull(unmarked.score)

    @classmethod
    def build(
        cls,
        gen,
        *,
        message_bits: int = 32,
        seed: int = 0,
        steps: int = JOINT_STEPS,
        sampler_steps: int = SAMPLER_STEPS,
        finetune_steps: int = FINETUNE_STEPS,
        finetune_images: int = 1024,
        routing: str = "bit",
        fidelity: float = 1.0,
        progress: bool = True,
        message=None,
    ):
        """Attach markers to the run's network, train them with an extractor on its own samples, then
        (``sampler_steps > 0``) both together through the sampler (:meth:`train_through_sampler`), then
        (``finetune_steps > 0``) the extractor alone on ``finetune_images`` fully sampled marked images.

        ``fidelity`` scales the fidelity weights of the first two phases (0.1 on the velocity in the joint phase,
        1.0 on the image through the sampler): larger keeps the marked samples closer to the unmarked ones."""
        run = getattr(gen, "run", None)
        if run is None:
            raise ConfigError("MOLM needs a generator with a network (a `genimage train` run), not an analytic flow.")
        if not fidelity >= 0:
            raise ConfigError(f"MOLM's fidelity scale must be at least 0, got {fidelity}.")
        g = torch.Generator().manual_seed(derive_seed(seed, "molm-data"))
        noise = torch.randn(384, *gen.noise_shape, generator=g)
        images = generate_batched(gen, noise)
        lora_seed = derive_seed(seed, "molm-lora")
        attach_markers(run.model, message_bits, routing=routing, generator=torch.Generator().manual_seed(lora_seed))
        extractor = train_molm(
            run.model,
            gen.to_state(images[:256]),
            bits=message_bits,
            steps=steps,
            fidelity=JOINT_FIDELITY * fidelity,
            seed=seed,
            progress=progress,
            to_image=gen.to_image,
            path=run.path,
            prediction=run.prediction,
            t_end=run.t_end,
        )
        key = new_key(
            "molm", gen.image_shape, seed=derive_seed(seed, "molm"), message=message, message_bits=message_bits
        )  # the markers are trained over random keys: ``message`` (bits, default drawn from the seed) is the one used
        scheme = cls(run.model, extractor, key.message_tensor(), images[256:])
        scheme.routing = routing  # recorded by genimage.watermark.scheme_files.save_scheme
        if sampler_steps > 0:
            scheme.train_through_sampler(
                gen, steps=sampler_steps, fidelity=SAMPLER_FIDELITY * fidelity, seed=seed, progress=progress
            )
        if finetune_steps > 0:
            scheme.finetune(gen, steps=finetune_steps, images=finetune_images, seed=seed, progress=progress)
        return scheme

    def train_through_sampler(
        self, gen, *, steps: int, fidelity: float = SAMPLER_FIDELITY, seed: int = 0, progress: bool = True
    ) -> dict[str, float]:
        """Train the adapters and the extractor together on fully sampled images (module-level
        :func:`train_through_sampler`, draws from ``seed``) and refit the null; returns its report."""
        report = train_through_sampler(
            gen, self.model, self.extractor, bits=self.message.numel(), steps=steps, fidelity=fidelity,
            seed=derive_seed(seed, "molm-sampler"), progress=progress,
        )  # fmt: skip
        self._fit_null()
        return report

    def finetune(
        self,
        gen,
        *,
        steps: int = FINETUNE_STEPS,
        images: int = 1024,
        held_out: int = 256,
        seed: int = 0,
        progress: bool = True,
    ) -> dict[str, float]:
        """Train the extractor alone on ``images`` fully sampled images with random keys (the adapters frozen),
        keeping the weights that read ``held_out`` further ones best, and refit the null; the keys and noises are
        drawn from ``seed``. Returns :func:`train_extractor`'s report."""
        g = torch.Generator().manual_seed(derive_seed(seed, "molm-finetune"))
        n = images + held_out
        noise = torch.randn(n, *gen.noise_shape, generator=g)
        keys = torch.randint(0, 2, (n, self.message.numel()), generator=g)
        marked = sample_marked(gen, self.model, noise, keys)
        report = train_extractor(
            self.extractor,
            marked[:images],
            keys[:images],
            marked[images:],
            keys[images:],
            steps=steps,
            seed=seed,
            progress=progress,
        )
        self._fit_null()
        return report

    def mark(self, gen, noise: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
        return sample_marked(gen, self.model, noise, self.message.expand(noise.shape[0], -1))

    def detect(self, images: torch.Tensor):
        return decoder_detection(self.extractor, images, self.message, self.null)
