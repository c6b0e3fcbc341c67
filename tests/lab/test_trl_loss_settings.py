"""The GRPOConfig fields of TRL 1.16 that change the loss beside the advantage, against TRL's own code.

AggregationGRPOTrainer moves each rule's weights into the advantages (docs/trl.md, "Exact"). Every
other setting that enters TRL's `_compute_loss` acts on the token terms or adds a term of its own;
for each, TRL's loss (and its gradient) is checked here against what docs/trl.md says it does to
each rule, written from grpo_ba's aggregators and the setting's formula: "TRL's settings that
change the loss". Off-policy ratios throughout, so the clip is active and the KL is not 0.
"""
import pytest
import torch

trl = pytest.importorskip("trl", reason="TRL is optional: pip install -r requirements/trl.txt")

from trl import GRPOTrainer  # noqa: E402

from grpo_ba import AGGREGATORS, clipped_token_loss  # noqa: E402
from grpo_ba_lab.integrations.trl_balanced import RULES  # noqa: E402
from test_trl_rules import G, make_trainer  # noqa: E402

pytestmark = pytest.mark.slow                      # builds tiny models and runs TRL's trainer


def off_policy_batch(trainer):
    """TRL's own generation batch (two groups), rescaled by the trainer, with old log-probs 0.3 away."""
    trainer.model.train()
    rows = [{"prompt": "12+3+4="}] * G + [{"prompt": "45+6+7="}] * G
    torch.manual_seed(0)
    raw = GRPOTrainer._generate_and_score_completions(trainer, rows)
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions(rows)
    assert (raw["advantages"] > 0).any() and (raw["advantages"] < 0).any()
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    with torch.no_grad():
        logp0 = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention,
                                                           batch["completion_ids"].shape[1])[0]
    batch["old_per_token_logps"] = logp0 + 0.3 * torch.randn(logp0.shape, generator=torch.Generator().manual_seed(1))
    trainer.current_gradient_accumulation_steps = 1                            # set by train() in real use
    return raw, batch


def logps_and_entropies(trainer, batch):
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    return trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, batch["completion_ids"].shape[1],
                                                      compute_entropy=True)[:2]       # (log-probs, entropies)


def expected_loss(setting, rule, trainer, raw, batch):
    """What docs/trl.md says TRL computes with the setting, from grpo_ba's aggregator of the rule."""
    adv, mask = raw["advantages"], raw["completion_mask"].float()
    old = batch["old_per_token_logps"]
    logp, entropies = logps_and_entropies(trainer, batch)
    rho = torch.exp(logp - old)
    aggregate = AGGREGATORS[rule]
    if setting == "delta":                          # the unclipped branch's ratio capped at delta: still times A
        capped = torch.clamp(rho, max=trainer.args.delta)
        clipped = torch.clamp(rho, 1 - trainer.epsilon_low, 1 + trainer.epsilon_high)
        terms = -torch.min(capped * adv[:, None], clipped * adv[:, None]) * mask
        return aggregate(terms, mask, adv, G)
    terms = clipped_token_loss(logp, old, adv, mask, trainer.epsilon_low, trainer.epsilon_high)
    if setting == "beta":                           # the rule's policy term, plus dapo's token mean of beta * KL
        q = batch["ref_per_token_logps"] - logp
        kl = torch.exp(q) - q - 1
        if trainer.args.use_bias_correction_kl:    # TRL 1.16's default: the KL term times the ratio
            kl = kl * rho
        return aggregate(terms, mask, adv, G) + trainer.beta * (kl * mask).sum() / batch["num_items_in_batch"]
    if setting == "entropy_coef":                   # the rule's term, minus coef x the token-mean entropy
        return aggregate(terms, mask, adv, G) - trainer.entropy_coef * (entropies * mask).sum() / mask.sum()
    if setting == "off_policy_mask_threshold":      # dropped responses keep no term; the others keep their weights
        return aggregate(terms * dropped_rows(trainer, raw, batch, logp).logical_not()[:, None], mask, adv, G)
    if setting == "top_entropy_quantile":           # TRL's high-entropy tokens only; the lengths stay the mask's
        keep = trainer.get_high_entropy_mask(entropies, mask, 1 - trainer.top_entropy_quantile)
        return aggregate(terms * keep, mask, adv, G)
    if setting == "vllm_importance_sampling_correction":   # each token's term times its sampling correction
        return aggregate(terms * batch["importance_sampling_ratio"], mask, adv, G)
    raise AssertionError(setting)


def dropped_rows(trainer, raw, batch, logp):
    """TRL's off-policy sequence mask, by its definition: a negative-advantage response whose mean KL from
    the sampling policy (old - current, over its tokens) exceeds the threshold."""
    mask = raw["completion_mask"].float()
    kl = ((batch["old_per_token_logps"] - logp.detach()) * mask).sum(1) / mask.sum(1).clamp(min=1)
    return (raw["advantages"] < 0) & (kl > trainer.off_policy_mask_threshold)


SETTINGS = {"delta": dict(delta=1.1), "beta": dict(), "entropy_coef": dict(entropy_coef=0.05),
            "off_policy_mask_threshold": dict(off_policy_mask_threshold=0.0),
            "top_entropy_quantile": dict(top_entropy_quantile=0.5),
            "vllm_importance_sampling_correction": dict()}


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("rule", RULES)
def test_each_loss_setting_does_to_each_rule_what_the_page_says(tmp_path, rule, setting):
    trainer = make_trainer(tmp_path, rule=rule, **SETTINGS[setting])
    raw, batch = off_policy_batch(trainer)
    if setting == "off_policy_mask_threshold":      # a threshold that drops some negative responses, not all
        logp, _ = logps_and_entropies(trainer, batch)
        mask = raw["completion_mask"].float()
        kl = ((batch["old_per_token_logps"] - logp.detach()) * mask).sum(1) / mask.sum(1).clamp(min=1)
        trainer.off_policy_mask_threshold = kl[raw["advantages"] < 0].median().item()
        dropped = dropped_rows(trainer, raw, batch, logp)
        assert dropped.any() and ((raw["advantages"] < 0) & ~dropped).any()   # a real test case
    if setting == "beta":                           # TRL's reference model, as a batch of its log-probs
        trainer.beta = 0.1                          # (built with beta=0: a tiny model has no hub id to reload)
        batch["ref_per_token_logps"] = batch["old_per_token_logps"] - 0.2 * torch.rand(
            batch["old_per_token_logps"].shape, generator=torch.Generator().manual_seed(3))
    if setting == "vllm_importance_sampling_correction":   # as TRL runs it with vLLM: a ratio per token
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
        batch["importance_sampling_ratio"] = 0.5 + torch.rand(batch["completion_mask"].shape,
                                                              generator=torch.Generator().manual_seed(2))
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    trl_loss = trainer.compute_loss(trainer.model, batch)
    trl_grads = torch.autograd.grad(trl_loss, params)
    ours = expected_loss(setting, rule, trainer, raw, batch)
    our_grads = torch.autograd.grad(ours, params)
    assert trl_loss.item() == pytest.approx(ours.item(), rel=1e-5, abs=1e-7)
    for a, b in zip(trl_grads, our_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)
    # the control: without the setting's own part the loss differs, so the test sees the setting
    plain = AGGREGATORS[rule](clipped_token_loss(logps_and_entropies(trainer, batch)[0], batch["old_per_token_logps"],
                                                 raw["advantages"], raw["completion_mask"].float(),
                                                 trainer.epsilon_low, trainer.epsilon_high),
                              raw["completion_mask"].float(), raw["advantages"], G)
    assert plain.item() != pytest.approx(ours.item(), rel=1e-4, abs=1e-6)


def test_the_page_names_every_setting_tested_here():
    import os
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "trl.md")) as f:
        page = f.read()
    section = page.split("**TRL's settings that change the loss.**")[1].split("\n\n")[0]
    for setting in SETTINGS:
        assert f"`{setting}`" in section, setting
