"""The evaluation harness and its report against hand-computed numbers on stub schemes with known outputs.

The stubs return fixed scores, p-values and bits for the marked and the unmarked set, so every number of a record
(TPR at each nominal FPR, realised FPR, AUC, bit accuracy, KS calibration, PSNR) is known by hand, and they record
the images they are given, so which set was attacked, paired and decoded is checked against the generator's own
closed form.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from scipy import stats

from genimage.watermark import evaluate as harness
from genimage.watermark.evaluate import EvaluationConfig, ImageScheme, evaluate_watermarks
from genimage.watermark.generators import GaussianFlowGenerator
from genimage.watermark.report import headline, write_markdown
from genimage.watermark.spherical import Detection

N = 4
P_MARKED = torch.tensor([0.0005, 0.005, 0.02, 0.5], dtype=torch.float64)  # p < 0.01: 2 of 4; p < 0.001: 1 of 4
P_CLEAN = torch.tensor([0.0001, 0.3, 0.6, 0.9], dtype=torch.float64)  # p < 0.01 and p < 0.001: 1 of 4
S_MARKED = torch.tensor([3.0, 2.0, 0.5, -1.0], dtype=torch.float64)
S_CLEAN = torch.tensor([1.0, 0.0, -2.0, -3.0], dtype=torch.float64)  # marked above clean in 4 + 4 + 3 + 2 of 16
MESSAGE = torch.tensor([1, 0, 1])
B_MARKED = torch.tensor([[1, 0, 1], [1, 0, 0], [0, 1, 0], [1, 0, 1]])  # 3 + 2 + 0 + 3 of 12 bits right
B_CLEAN = 1 - B_MARKED


def _detection(call: int) -> Detection:
    """The harness decodes the marked set, then the unmarked one, under each attack."""
    if call % 2 == 0:
        return Detection(score=S_MARKED, pvalue=P_MARKED, bits=B_MARKED)
    return Detection(score=S_CLEAN, pvalue=P_CLEAN, bits=B_CLEAN)


def _check_numbers(rec: dict) -> None:
    assert rec["n"] == N
    assert rec["tpr_at_1fpr"] == 0.5 and rec["tpr_at_01fpr"] == 0.25 and rec["fpr_at_1fpr"] == 0.25
    assert rec["auc"] == pytest.approx(13 / 16)
    assert rec["bit_accuracy"] == pytest.approx(8 / 12)
    assert rec["pvalue_ks"] == pytest.approx(stats.kstest(P_CLEAN.numpy(), "uniform").pvalue)


def _generator() -> GaussianFlowGenerator:  # samples 0.1 z: a 0.05 mark plus 0.1 noise stays far from the clip
    return GaussianFlowGenerator(torch.zeros(1, 8, 8), torch.full((1, 8, 8), 0.1))


def test_image_scheme_records_pair_marked_and_unmarked_images_of_the_same_noise_under_the_same_attack():
    class Probe(ImageScheme):
        name, message = "probe", MESSAGE

        def __init__(self) -> None:
            self.marked, self.seen = [], []

        def mark(self, gen, noise, clean):
            assert torch.equal(clean, gen.generate(noise))  # the unmarked image of the very same noise
            self.marked.append((noise, clean))
            return clean + 0.05

        def detect(self, images):
            self.seen.append(images.clone())
            return _detection(len(self.seen) - 1)

    probe = Probe()
    records = evaluate_watermarks(_generator(), [probe], ["none", "noise0.1"], EvaluationConfig(n=N, progress=False))
    assert [(r["scheme"], r["attack"]) for r in records] == [("probe", "none"), ("probe", "noise0.1")]
    for rec in records:
        _check_numbers(rec)
        assert rec["psnr"] == pytest.approx(10 * math.log10(4 / 0.05**2), abs=1e-3)
    ((noise, clean),) = probe.marked
    assert torch.equal(noise, torch.randn(N, 1, 8, 8, generator=torch.Generator().manual_seed(0)))  # config.seed
    marked = clean + 0.05
    seen_m, seen_c, att_m, att_c = probe.seen
    assert torch.equal(seen_m, marked) and torch.equal(seen_c, clean)  # no attack: the sets themselves
    # the attack hits both sets, with one draw: the same noise is added to the marked and to the unmarked image
    assert float((att_m - marked).std()) == pytest.approx(0.1, rel=0.2)
    torch.testing.assert_close(att_m - marked, att_c - clean, atol=1e-6, rtol=0)


def test_noise_scheme_records_decode_the_inverted_attacked_marks_and_the_shared_unmarked_inversions(monkeypatch):
    class Stub:
        multibit = True

        def __init__(self) -> None:
            self.embedded, self.seen = [], []

        def embed(self, n, generator=None):
            z = torch.randn(n, 1, 8, 8, generator=generator)
            self.embedded.append(z)
            return z

        def detect(self, noise, generator=None):
            self.seen.append(noise.clone())
            return _detection(len(self.seen) - 1)

    stub = Stub()
    monkeypatch.setattr(harness, "noise_scheme", lambda key: stub)
    monkeypatch.setattr(harness.WatermarkKey, "message_tensor", lambda self: MESSAGE, raising=False)
    cfg = EvaluationConfig(n=N, message_bits=3, noise_samples=64, progress=False)
    records = evaluate_watermarks(_generator(), ["spherical"], ["none"], cfg)
    _check_numbers(records[0])
    marks, clean_noise = stub.embedded[0], torch.randn(N, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    seen_m, seen_c = stub.seen
    torch.testing.assert_close(seen_m, marks, atol=1e-5, rtol=0)  # the exact flow inverts its own samples
    torch.testing.assert_close(seen_c, clean_noise, atol=1e-5, rtol=0)


def _cells(markdown: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in markdown.strip().splitlines()]


def test_markdown_report_shows_each_records_numbers_under_its_own_column(tmp_path):
    records = [
        {"scheme": "spherical", "attack": "none", "bit_accuracy": 0.99609375, "tpr_at_1fpr": 1.0,
         "tpr_at_01fpr": 0.984375, "fpr_at_1fpr": 0.015625, "auc": 0.99951171875, "pvalue_ks": 0.4375,
         "detect_nfe": 50, "psnr": 33.0},
        {"scheme": "tree-ring", "attack": "jpeg75", "bit_accuracy": None, "tpr_at_1fpr": 0.71875,
         "tpr_at_01fpr": 0.5, "fpr_at_1fpr": 0.0, "auc": 0.875, "pvalue_ks": 0.0625, "detect_nfe": 50},
    ]  # fmt: skip
    write_markdown(tmp_path / "t.md", records)
    head, rule, *rows = _cells((tmp_path / "t.md").read_text())
    assert head == list(harness.HEADLINE_COLUMNS) and set(rule) == {"---"}
    assert len(rows) == len(records)
    for row, rec in zip(rows, records, strict=True):
        for col, cell in zip(head, row, strict=True):
            value = rec[col]
            if value is None:
                assert cell == "-"
            elif isinstance(value, str):
                assert cell == value
            else:
                assert re.fullmatch(r"-?\d+(\.\d+)?", cell), cell
                assert float(cell) == pytest.approx(value, abs=5e-5), (col, cell, value)
    assert [headline(r) for r in records] == [0.99609375, 0.71875]  # bit accuracy, else TPR at 1% FPR
    assert headline({"bit_accuracy": 0.0, "tpr_at_1fpr": 1.0}) == 0.0  # a zero accuracy is still the headline
