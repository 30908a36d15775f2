"""The masked discrete prior over code indices (``gengraph train --prior masked-codes``)."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError
from gengraph.cli import main
from gengraph.experiment import RunConfig, load_latent_run
from gengraph.io import read_graph_set
from gengraph.models.code_prior import CodePriorConfig, CodeTokenPrior, code_prior_loss, sample_code_sets


def _features(model: CodeTokenPrior, tokens: torch.Tensor) -> torch.Tensor:
    return model.process.features(tokens)


def test_padding_is_forced_and_never_drawn_at_real_nodes() -> None:
    torch.manual_seed(0)
    model = CodeTokenPrior(CodePriorConfig(n_codes=6, hidden=16, layers=1)).eval()
    mask = torch.tensor([[True, True, True, False, False], [True, True, True, True, True]])
    tokens = torch.full((2, 5), model.process.mask_index)
    logp = model(_features(model, tokens), torch.tensor([0.3, 0.7]), mask=mask).log_softmax(-1)
    # a padded node is the padding token with probability one (it costs no nats), a real node never is
    assert torch.equal(logp[~mask][:, model.pad], torch.zeros(2))
    assert (logp[mask][:, model.pad] < -1e3).all()
    codes = sample_code_sets(model, mask, steps=4, generator=torch.Generator().manual_seed(1))
    assert codes.shape == (2, 5) and codes.dtype == torch.long
    assert ((codes[mask] >= 0) & (codes[mask] < 6)).all() and (codes[~mask] == 0).all()
    again = sample_code_sets(model, mask, steps=4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(codes, again)


def test_prior_is_permutation_equivariant() -> None:
    torch.manual_seed(0)
    model = CodeTokenPrior(CodePriorConfig(n_codes=5, hidden=16, layers=2)).eval()
    tokens = torch.tensor([[0, 6, 3, 2, 6, 5]])  # 6 is the mask token, 5 the padding
    mask = torch.tensor([[True, True, True, True, True, False]])
    perm = torch.tensor([3, 0, 4, 2, 1, 5])
    out = model(_features(model, tokens), torch.tensor([0.4]), mask=mask)
    permuted = model(_features(model, tokens[:, perm]), torch.tensor([0.4]), mask=mask[:, perm])
    torch.testing.assert_close(permuted, out[:, perm], atol=1e-5, rtol=1e-5)


def test_repeat_bias_counts_the_visible_codes_of_real_nodes() -> None:
    torch.manual_seed(0)
    model = CodeTokenPrior(CodePriorConfig(n_codes=6, hidden=16, layers=1)).eval()
    m = model.process.mask_index
    # code 1 visible five times (the last class: 4 or more), code 2 twice, code 0 once; the code 3 sits at a
    # padded node and must not count
    tokens = torch.tensor([[1, 1, 1, 1, 1, 2, 2, 0, m, m, 3]])
    mask = torch.ones(1, 11, dtype=torch.bool)
    mask[0, -1] = False
    features = model.process.features(tokens)
    plain = model(features, torch.tensor([0.5]), mask=mask)
    with torch.no_grad():
        model.repeat.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    biased = model(features, torch.tensor([0.5]), mask=mask)
    expected = torch.tensor([1.0, 4.0, 2.0, 0.0, 0.0, 0.0, 0.0])  # per class; the padding class (6) gets none
    torch.testing.assert_close((biased - plain)[0, :-1], expected.expand(10, -1))
    torch.testing.assert_close(biased[0, -1], plain[0, -1])  # the padded node stays forced to the padding


def test_prior_saved_without_a_repeat_bias_loads_with_a_zero_one() -> None:
    model = CodeTokenPrior(CodePriorConfig(n_codes=6, hidden=16, layers=1))
    state = {k: v for k, v in model.state_dict().items() if k != "repeat"}
    with torch.no_grad():
        model.repeat.fill_(3.0)
    model.load_state_dict(state)
    assert torch.equal(model.repeat, torch.zeros(4))


def test_prior_learns_that_codes_do_not_repeat() -> None:
    """Each set holds 8 distinct codes of 16: independent draws from the code usage put C(8, 2) / 16 = 1.75 node
    pairs per set on one code. The same training without the repeat bias (frozen at zero) left 0.65-0.99 pairs
    over four seeds, with it 0.41-0.44."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = CodeTokenPrior(CodePriorConfig(n_codes=16, hidden=32, layers=2))
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    mask = torch.ones(64, 8, dtype=torch.bool)
    for _ in range(300):
        codes = torch.stack([torch.randperm(16, generator=gen)[:8] for _ in range(64)])
        loss, _ = code_prior_loss(model, codes, mask, gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert model.repeat[0] < 0  # a code already in the set became less likely
    codes = sample_code_sets(model.eval(), torch.ones(400, 8, dtype=torch.bool), steps=64,
                             generator=torch.Generator().manual_seed(2))  # fmt: skip
    same = (codes[:, :, None] == codes[:, None, :]).triu(1).sum((1, 2)).float().mean()
    assert same < 0.55, same


def test_prior_learns_which_codes_occur_together() -> None:
    """Codes come in four fixed pairs and every set holds two whole pairs (4 nodes), or one (2 nodes, padded):
    a prior that learned only the codes' usage puts a node beside its partner in 1 - (7/8)^3 = 0.33 of the
    four-node sets; the masked prior must learn the pairing."""
    torch.manual_seed(0)
    partner = torch.tensor([1, 0, 3, 2, 5, 4, 7, 6])
    gen = torch.Generator().manual_seed(0)

    def batch(b: int) -> tuple[torch.Tensor, torch.Tensor]:
        pairs = torch.stack([torch.randperm(4, generator=gen)[:2] for _ in range(b)])  # two of the four pairs
        codes = torch.stack([2 * pairs, 2 * pairs + 1], -1).reshape(b, 4)
        codes = torch.stack([c[torch.randperm(4, generator=gen)] for c in codes])
        mask = torch.ones(b, 4, dtype=torch.bool)
        mask[: b // 4, 2:] = False  # a quarter of the sets hold one pair
        one_pair = ~mask[:, 2]
        codes[one_pair, 1] = partner[codes[one_pair, 0]]
        return codes, mask

    model = CodeTokenPrior(CodePriorConfig(n_codes=8, hidden=32, layers=2))
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    for _ in range(800):
        codes, mask = batch(64)
        loss, _ = code_prior_loss(model, codes, mask, gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    mask = torch.ones(400, 4, dtype=torch.bool)
    mask[:200, 2:] = False
    # enough steps that two nodes are seldom unmasked in one step (drawn independently there)
    codes = sample_code_sets(model, mask, steps=32, generator=torch.Generator().manual_seed(2))
    big, small = codes[200:], codes[:200, :2]
    beside = (big[:, :, None] == partner[big][:, None, :]).any(1).float().mean()
    assert beside > 0.9, beside
    assert (small[:, 1] == partner[small[:, 0]]).float().mean() > 0.9
    assert (codes[mask] < 8).all()


def test_flow_only_settings_are_refused_with_the_masked_prior() -> None:
    with pytest.raises(ConfigError, match="prior_distance_bias is a setting of the flow prior"):
        RunConfig(prior="masked-codes", prior_distance_bias=True).validate()
    with pytest.raises(ConfigError, match="prior_coupling is a setting of the flow prior"):
        RunConfig(prior="masked-codes", prior_coupling="set-ot").validate()
    with pytest.raises(ConfigError, match="prior"):
        RunConfig(prior="diffusion").validate()


def test_cli_trains_and_samples_with_the_masked_code_prior(tmp_path) -> None:
    run = tmp_path / "run"
    argv = ["train", "--data", "community-small", "--steps", "3", "--prior", "masked-codes", "--prior-hidden", "32"]
    assert main([*argv, "--no-progress", "--out", str(run)]) == 0
    ae, prior = load_latent_run(run)
    assert isinstance(prior, CodeTokenPrior) and prior.config.n_codes == ae.codebook.size
    assert prior.config.hidden == 32
    out = tmp_path / "g.json"
    assert main(["sample", "--run", str(run), "--n", "5", "--steps", "3", "--out", str(out)]) == 0
    graphs = read_graph_set(out)
    assert len(graphs) == 5 and all(12 <= g.n_nodes <= 20 for g in graphs)
    assert main([*argv, "--prior-distance-bias", "--out", str(tmp_path / "bad")]) != 0
    assert not (tmp_path / "bad").exists()


def test_loss_and_samples_of_a_prior_with_fixed_logits() -> None:
    """A prior whose readout is a constant ``b`` (zero weights, no repeat bias) predicts ``softmax(b[:K])`` at
    every real node: the loss of sets holding only code 2 is ``-log softmax(b[:K])[2]`` however many nodes are
    padded (padding is neither a target nor in the mean), and samples follow ``softmax(b[:K])``. A code equal
    to the padding token at a real node is refused (it was taken as padding, silently)."""
    from gencore.errors import InputError

    model = CodeTokenPrior(CodePriorConfig(n_codes=4, hidden=16, layers=1))
    b = torch.tensor([0.5, -1.0, 1.5, 0.0, 3.0])  # the last logit is the padding class, forced anyway
    with torch.no_grad():
        model.out.weight.zero_()
        model.out.bias.copy_(b)
    mask = torch.zeros(64, 10, dtype=torch.bool)
    mask[:, :3] = True  # 3 real nodes, 7 padded
    codes = torch.full((64, 10), 2).masked_fill(~mask, 3)
    loss, _ = code_prior_loss(model, codes, mask, torch.Generator().manual_seed(0))
    torch.testing.assert_close(loss, -b[:4].log_softmax(-1)[2])
    # without a generator (the global stream) too: it read ``generator.device`` and raised AttributeError
    torch.testing.assert_close(code_prior_loss(model, codes, mask, None)[0], -b[:4].log_softmax(-1)[2])
    gen = torch.Generator().manual_seed(0)
    drawn = sample_code_sets(model.eval(), mask[:, :5].repeat(40, 1), steps=3, generator=gen)
    share = torch.bincount(drawn[:, :3].flatten(), minlength=4).float() / drawn[:, :3].numel()
    assert (share - b[:4].softmax(-1)).abs().max() < 0.02 and (drawn[:, 3:] == 0).all()
    for bad in (4, -1):
        with pytest.raises(InputError, match=r"codes of real nodes must lie in \[0, 4\)"):
            code_prior_loss(model, codes.index_fill(1, torch.tensor([1]), bad), mask, gen)


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_a_seed_out_of_range_is_refused_by_the_run_config(seed) -> None:
    """A YAML --config seed bypasses the --seed flag's check; torch's generator raised on 2**64."""
    with pytest.raises(ConfigError, match=r"^seed must be an integer from 0 to"):
        RunConfig(seed=seed).validate()
