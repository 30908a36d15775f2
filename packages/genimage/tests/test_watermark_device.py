"""Where the watermark suite computes: ``--device``, the generator as the device boundary, seeded adapters.

The CUDA tests run only where CUDA exists (this project's CI has none); the rest pin what does not depend on
the device: the draws, the seeded MOLM adapters, the caller's global RNG, the regeneration attack.
"""

from __future__ import annotations

import json

import pytest
import torch

from genimage.cli import main
from genimage.watermark.evaluate import EvaluationConfig, evaluate_watermarks
from genimage.watermark.generators import GaussianFlowGenerator, RunGenerator
from genimage.watermark.hidden import HiddenConfig, train_hidden
from genimage.watermark.molm import MOLMScheme, _markers

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_regeneration_at_full_strength_is_a_fresh_sample_from_the_same_draws() -> None:
    gen = GaussianFlowGenerator(torch.zeros(1, 8, 8), torch.full((1, 8, 8), 0.3), steps=12)
    images = torch.rand(3, 1, 8, 8) * 2 - 1
    out = gen.regenerate(images, 1.0, generator=torch.Generator().manual_seed(5))
    eps = torch.randn(images.shape, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(out, gen._solve(eps, 0.0, 1.0).clamp(-1, 1))
    assert out.dtype == images.dtype and out.device.type == "cpu"
    light = gen.regenerate(images.clamp(-0.9, 0.9), 0.02, generator=torch.Generator().manual_seed(5))
    assert float((light - images.clamp(-0.9, 0.9)).abs().mean()) < 0.1  # a weak attack keeps the image


def test_hidden_training_leaves_the_callers_global_rng_alone() -> None:
    images = torch.rand(16, 1, 8, 8) * 2 - 1
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = train_hidden(images, HiddenConfig(message_bits=4, steps=2, batch_size=4, seed=7), progress=False)
    assert torch.equal(torch.rand(3), expected)  # it used to reseed the global generator with cfg.seed
    b = train_hidden(images, HiddenConfig(message_bits=4, steps=2, batch_size=4, seed=7), progress=False)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_molm_is_reproducible_whatever_the_global_rng(digits_run) -> None:
    """The adapters' initial weights come from the seed, not from whatever state the global generator is in."""
    built = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        gen = RunGenerator(digits_run, steps=2)
        scheme = MOLMScheme.build(gen, message_bits=2, seed=4, steps=2, sampler_steps=2, progress=False)
        built.append(([m.A.detach().clone() for m in _markers(gen.run.model)], scheme.extractor.state_dict()))
    (a0, e0), (a1, e1) = built
    for x, y in zip(a0, a1):  # trained for two steps: equal up to the CPU kernels' summation order
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)
    for k in e0:
        torch.testing.assert_close(e0[k], e1[k], atol=1e-5, rtol=0)


def test_watermark_on_cuda_without_cuda_is_one_line(digits_run, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "wm.json"
    argv = ["watermark", "evaluate", "--run", str(digits_run), "--schemes", "spherical", "--attacks", "none"]
    assert main([*argv, "--n", "4", "--json", str(out), "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no usable CUDA device" in err[0] and not out.exists()


def test_evaluate_takes_device_cpu(digits_run, tmp_path) -> None:
    out = tmp_path / "wm.json"
    argv = ["watermark", "evaluate", "--run", str(digits_run), "--schemes", "spherical", "--attacks", "none"]
    argv += ["--n", "4", "--noise-samples", "32", "--json", str(out), "--device", "cpu", "--no-progress"]
    assert main(argv) == 0
    assert json.loads(out.read_text())["records"][0]["scheme"] == "spherical"


@cuda
def test_run_generator_on_cuda_matches_the_cpu_and_returns_cpu_tensors(digits_run) -> None:
    cpu, gpu = RunGenerator(digits_run, steps=8), RunGenerator(digits_run, steps=8, device="cuda")
    noise = torch.randn(4, *cpu.noise_shape, generator=torch.Generator().manual_seed(0))
    images = cpu.generate(noise)
    outputs = {
        "generate": (cpu.generate(noise), gpu.generate(noise)),
        "invert": (cpu.invert(images), gpu.invert(images)),
        "regenerate": (
            cpu.regenerate(images, 0.5, torch.Generator().manual_seed(1)),
            gpu.regenerate(images, 0.5, torch.Generator().manual_seed(1)),
        ),
    }
    for name, (x_cpu, x_gpu) in outputs.items():
        assert x_gpu.device.type == "cpu", name
        torch.testing.assert_close(x_gpu, x_cpu, atol=2e-2, rtol=0, msg=name)  # TF32 convolutions on cuDNN
    assert gpu.to_state(images).device.type == "cuda"


@cuda
def test_every_scheme_evaluates_on_cuda(digits_run) -> None:
    from genimage.watermark.image_schemes import GuidanceScheme, HiddenScheme, train_for_generator

    gen = RunGenerator(digits_run, steps=4, device="cuda")
    trained = train_for_generator(gen, message_bits=2, seed=0, n_train=32, n_null=16, steps=5, progress=False)
    assert next(trained[0].parameters()).device.type == "cuda"
    schemes = [
        "spherical",
        "tree-ring",
        "gaussian-shading",
        GuidanceScheme.build(gen, message_bits=2, progress=False, trained=trained),
        HiddenScheme.build(gen, message_bits=2, progress=False, trained=trained),
        MOLMScheme.build(gen, message_bits=2, steps=3, sampler_steps=3, progress=False),
    ]
    cfg = EvaluationConfig(n=8, message_bits=1, noise_samples=32, progress=False)
    records = evaluate_watermarks(gen, schemes, ["none", "jpeg75", "regen0.3"], cfg)
    assert len(records) == 18
    for r in records:
        assert 0.0 <= r["auc"] <= 1.0 and 0.0 <= r["tpr_at_1fpr"] <= 1.0, r
