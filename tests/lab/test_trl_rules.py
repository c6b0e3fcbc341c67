"""AggregationGRPOTrainer with AggregationGRPOConfig(aggregation_rule=...) makes TRL's own loss equal grpo_ba's aggregate of each rule,
per group; TRL's dapo is the per-group token rule only when the groups' total lengths agree."""
import pytest
import torch

trl = pytest.importorskip("trl", reason="TRL is optional: pip install -r requirements/trl.txt")

from datasets import Dataset  # noqa: E402
import trl.trainer.grpo_trainer as trl_grpo  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpo_ba import AGGREGATORS, aggregate_token, aggregation_coefficients, clipped_token_loss, token_logprobs  # noqa: E402
from grpo_ba_lab.integrations.trl_balanced import (RULES, AggregationGRPOConfig, AggregationGRPOTrainer,
                                                   BalancedGRPOTrainer,  # noqa: E402
                                                   loss_mask, rule_advantages)
from toy_tasks.model import char_tokenizer, tiny_qwen3  # noqa: E402

pytestmark = pytest.mark.slow                      # builds tiny models and runs TRL's trainer
G = 4


def odd_length_reward(completions, **kwargs):
    return [float(len(c) % 2) for c in completions]


def make_trainer(tmp_path, rule="token", cls=AggregationGRPOTrainer, callbacks=None, **config):
    tokenizer = char_tokenizer()
    data = Dataset.from_dict({"prompt": ["12+3+4=", "45+6+7=", "30+1+1=", "77+2+9="]})   # equal lengths: no padding
    settings = {**dict(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=G,
                       max_completion_length=10, beta=0.0, use_cpu=True, report_to=[], temperature=1.0,
                       logging_steps=1, max_steps=1, save_strategy="no", bf16=False), **config}
    config = GRPOConfig(**settings) if cls is GRPOTrainer else AggregationGRPOConfig(aggregation_rule=rule, **settings)
    return cls(model=tiny_qwen3(tokenizer, seed=0), reward_funcs=odd_length_reward, args=config,
               train_dataset=data, processing_class=tokenizer, callbacks=callbacks)


from test_trl_balanced import trl_batches  # noqa: E402,F401  (every generation batch TRL makes)


def policy_logps(trainer, batch):
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    return trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, batch["completion_ids"].shape[1])[0]


# =====================================================================================
# Exact, for each rule: loss and gradients at off-policy ratios, clipping active
# =====================================================================================


@pytest.mark.parametrize("rule", RULES)
def test_trl_loss_and_gradients_equal_grpo_bas_aggregate_of_the_rule(tmp_path, rule):
    trainer = make_trainer(tmp_path, rule=rule)
    trainer.model.train()
    rows = [{"prompt": "12+3+4="}] * G + [{"prompt": "45+6+7="}] * G
    torch.manual_seed(0)
    raw = GRPOTrainer._generate_and_score_completions(trainer, rows)           # TRL's own batch
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions(rows)                      # the same, rescaled
    assert torch.equal(batch["completion_ids"], raw["completion_ids"])
    adv, mask = raw["advantages"], raw["completion_mask"].float()
    totals = mask.sum(1).view(-1, G).sum(1)
    assert (adv > 0).any() and (adv < 0).any() and totals[0] != totals[1]      # a real test case

    with torch.no_grad():
        logp0 = policy_logps(trainer, batch)
    old = logp0 + 0.3 * torch.randn(logp0.shape, generator=torch.Generator().manual_seed(1))
    batch["old_per_token_logps"] = old                                         # off-policy: ratios past the clip
    ratio = torch.exp(logp0 - old)[mask.bool()]
    assert ((ratio > 1 + trainer.epsilon_high) | (ratio < 1 - trainer.epsilon_low)).float().mean() > 0.1

    trainer.current_gradient_accumulation_steps = 1                            # set by train() in real use
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    trl_loss = trainer.compute_loss(trainer.model, batch)
    trl_grads = torch.autograd.grad(trl_loss, params)
    token_loss = clipped_token_loss(policy_logps(trainer, batch), old, adv, mask, trainer.epsilon_low,
                                    trainer.epsilon_high)
    ours = AGGREGATORS[rule](token_loss, mask, adv, G)
    our_grads = torch.autograd.grad(ours, params)
    assert trl_loss.item() == pytest.approx(ours.item(), rel=1e-5, abs=1e-7)
    for a, b in zip(trl_grads, our_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)
    others = [r for r in RULES if r != rule]                                   # the test tells the rules apart
    assert all(AGGREGATORS[r](token_loss, mask, adv, G).item() != pytest.approx(ours.item(), rel=1e-3)
               for r in others)


class GradientRecorder(TrainerCallback):
    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("rule", ["token", "sequence"])
def test_an_optimizer_step_over_accumulated_micro_batches_is_grad_of_the_rule(tmp_path, trl_batches, monkeypatch,
                                                                              rule):
    """GA = spg = 2: 12 rows (3 groups of 4) in two micro-batches of 6, a group split across them;
    the accumulated gradient of the one optimizer step is grad J_rule of the whole batch."""
    monkeypatch.setattr(trl_grpo, "shuffle_sequence_dict", lambda batch: batch)   # slices = rows in order
    recorder = GradientRecorder()
    trainer = make_trainer(tmp_path, rule=rule, callbacks=[recorder], per_device_train_batch_size=6,
                           gradient_accumulation_steps=2, steps_per_generation=2, max_grad_norm=0.0)
    trainer.train()
    (batch,) = trl_batches
    adv, mask = batch["advantages"], batch["completion_mask"].float()
    totals = mask.sum(1).view(-1, G).sum(1)
    assert (adv > 0).any() and (adv < 0).any() and len(set(totals.tolist())) > 1
    model = tiny_qwen3(char_tokenizer(), seed=0)                   # the weights before the step
    sequences = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    logp = token_logprobs(model, sequences, attention, batch["completion_ids"].shape[1])[0]   # (12, T)
    objective = AGGREGATORS[rule](clipped_token_loss(logp, logp.detach(), adv, mask), mask, adv, G)
    names, params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad])
    for name, grad in zip(names, torch.autograd.grad(objective, params)):
        assert torch.allclose(recorder.grads[name], grad, rtol=1e-4, atol=1e-7), name


def test_the_logged_bias_describes_the_batch_and_two_more_metrics_name_the_rule_trained(tmp_path, trl_batches):
    """The logged shares describe TRL's batch (its advantages before the rescaling), whatever the rule;
    aggregation/trained_<rule>/* name the rule that trains and give its share and J_rule at ratio 1."""
    logged = []
    for rule in ("token", "balanced"):
        trainer = make_trainer(tmp_path / rule, rule=rule)
        trainer.train()
        logged.append(trainer.state.log_history[0])
    assert torch.equal(trl_batches[0]["completion_ids"], trl_batches[1]["completion_ids"])   # same seed, same batch
    for key in ("pos_share_token", "pos_share_sequence", "pos_share_balanced", "token_loss_at_ratio_one"):
        key = f"aggregation/{key}"
        assert logged[0][key] == pytest.approx(logged[1][key], rel=1e-6), key
    token, balanced = logged
    assert token["aggregation/trained_token/pos_share"] == pytest.approx(token["aggregation/pos_share_token"])
    assert token["aggregation/trained_token/loss_at_ratio_one"] == pytest.approx(
        token["aggregation/token_loss_at_ratio_one"], rel=1e-5)
    assert balanced["aggregation/trained_balanced/pos_share"] == pytest.approx(0.5, abs=1e-5)
    assert balanced["aggregation/trained_balanced/loss_at_ratio_one"] == pytest.approx(0, abs=1e-6)
    assert not any("trained_balanced" in key for key in token) and not any("trained_token" in key for key in balanced)


# =====================================================================================
# TRL's dapo against the per-group token rule
# =====================================================================================


def manual_batch(lengths, rewards, width=8):
    """A generation batch in TRL's layout with chosen completion lengths: (B,) lists."""
    gen = torch.Generator().manual_seed(3)
    rows = len(lengths)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()          # (B, T)
    rewards = torch.tensor(rewards, dtype=torch.float32).view(-1, G)
    advantages = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).view(-1)
    return {"prompt_ids": torch.randint(3, 12, (rows, 3), generator=gen), "prompt_mask": torch.ones(rows, 3).long(),
            "completion_ids": torch.randint(3, 12, (rows, width), generator=gen) * mask, "completion_mask": mask,
            "advantages": advantages, "num_items_in_batch": mask.sum()}


@pytest.mark.parametrize("lengths, totals_agree", [
    ([1, 7, 2, 6, 3, 3, 3, 3], False),          # group totals 16 and 12
    ([1, 7, 2, 6, 4, 4, 3, 5], True),           # group totals 16 and 16, lengths inside each group differ
])
def test_trls_dapo_is_the_per_group_token_rule_only_when_group_totals_agree(tmp_path, lengths, totals_agree):
    dapo = make_trainer(tmp_path, cls=GRPOTrainer, loss_type="dapo")
    dapo.model.train()
    dapo.current_gradient_accumulation_steps = 1
    batch = manual_batch(lengths, [1, 0, 0, 1, 1, 1, 0, 0])
    mask, adv = batch["completion_mask"].float(), batch["advantages"]
    dapo_loss = dapo.compute_loss(dapo.model, batch)                              # TRL's pooled token mean
    logp = policy_logps(dapo, batch)
    per_group = aggregate_token(clipped_token_loss(logp, logp.detach(), adv, mask), mask, adv, G)
    rescaled = {**batch, "advantages": rule_advantages(adv, batch["completion_mask"], batch["num_items_in_batch"], G,
                                                       "token")}
    ours_in_trl = dapo.compute_loss(dapo.model, rescaled)                         # the plug-in's loss, TRL's code
    assert ours_in_trl.item() == pytest.approx(per_group.item(), rel=1e-5, abs=1e-7)
    if totals_agree:
        assert dapo_loss.item() == pytest.approx(per_group.item(), rel=1e-5, abs=1e-7)
    else:
        assert abs(dapo_loss.item() - per_group.item()) > 0.05 * abs(per_group.item())


# =====================================================================================
# One line for what cannot be exact; the pieces
# =====================================================================================


@pytest.mark.parametrize("kwargs, match", [
    (dict(aggregation_rule="tokens"), "aggregation_rule must be one of 'token', 'sequence', 'balanced'"),
    (dict(aggregation_rule="sequence", loss_type="grpo"), "needs loss_type='dapo'"),
    (dict(aggregation_rule="token", loss_type="bnpo"), "got 'bnpo'"),
    (dict(aggregation_rule="token", importance_sampling_level="sequence"), "importance_sampling_level"),
])
def test_a_configuration_that_cannot_be_exact_is_refused_in_one_line_when_the_config_is_built(tmp_path, kwargs,
                                                                                              match):
    """TRL's own config checks run in GRPOConfig.__post_init__; these do too, so a YAML or CLI run
    stops before the model, the reference model or a vLLM engine is built."""
    with pytest.raises(ValueError, match=match) as refused:
        AggregationGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **kwargs)
    assert "\n" not in str(refused.value)


def test_a_config_changed_after_it_was_built_is_refused_before_trl_builds_the_model(tmp_path, monkeypatch):
    config = AggregationGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], aggregation_rule="token")
    config.loss_type = "grpo"
    built = []
    monkeypatch.setattr(trl_grpo, "create_model_from_path", lambda *a, **k: built.append(a))
    with pytest.raises(ValueError, match="needs loss_type='dapo'"):
        AggregationGRPOTrainer(model="some/model-id", reward_funcs=odd_length_reward, args=config)
    assert built == []


def test_steps_per_generation_above_accumulation_is_warned_and_equal_is_not(tmp_path):
    with pytest.warns(UserWarning, match="steps_per_generation=4 > gradient_accumulation_steps=2.*unbiased estimate"):
        AggregationGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], gradient_accumulation_steps=2,
                              steps_per_generation=4)
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        AggregationGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], gradient_accumulation_steps=2)
    assert not [w for w in caught if "steps_per_generation" in str(w.message)]


def test_the_rule_is_a_config_field_set_from_trls_yaml_and_command_line(tmp_path):
    from trl import TrlParser
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"output_dir: {tmp_path}\naggregation_rule: token\nuse_cpu: true\nreport_to: none\n")
    parser = TrlParser((AggregationGRPOConfig,))
    (from_yaml,) = parser.parse_args_and_config(["--config", str(recipe)])
    (from_cli,) = parser.parse_args_and_config(["--config", str(recipe), "--aggregation_rule", "sequence"])
    assert (from_yaml.aggregation_rule, from_cli.aggregation_rule) == ("token", "sequence")
    assert AggregationGRPOConfig(output_dir=str(tmp_path), use_cpu=True).aggregation_rule == "balanced"
    with pytest.raises(SystemExit):                                   # argparse's choices
        parser.parse_args_and_config(["--config", str(recipe), "--aggregation_rule", "pooled"])


def test_the_rule_is_recorded_where_trl_records_its_config(tmp_path):
    """training_args.bin in every checkpoint, and to_dict / to_json_string, which the trackers
    (W&B, TensorBoard's args text, MLflow, trackio) log."""
    import json
    trainer = make_trainer(tmp_path, rule="sequence", save_strategy="steps", save_steps=1)
    trainer.train()
    saved = torch.load(tmp_path / "checkpoint-1" / "training_args.bin", weights_only=False)
    assert saved.aggregation_rule == "sequence" and trainer.rule == "sequence"
    assert json.loads(trainer.args.to_json_string())["aggregation_rule"] == "sequence"
    assert trainer.args.to_dict()["aggregation_rule"] == "sequence"


def test_balanced_trainer_is_the_balanced_rule_and_refuses_another_in_one_line(tmp_path):
    config = AggregationGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[],
                                   per_device_train_batch_size=8, num_generations=G)
    trainer = BalancedGRPOTrainer(model=tiny_qwen3(char_tokenizer(), seed=0), reward_funcs=odd_length_reward,
                                  args=config, train_dataset=Dataset.from_dict({"prompt": ["1+1="]}),
                                  processing_class=char_tokenizer())
    assert trainer.rule == "balanced" and isinstance(trainer, AggregationGRPOTrainer)
    assert trainer.loss_type == "dapo"                                            # TRL's default, untouched
    for call, error, match in [
            (lambda: BalancedGRPOTrainer(None, None, rule="token"), TypeError, "takes no rule=.*aggregation_rule"),
            (lambda: AggregationGRPOTrainer(None, None, rule="token"), TypeError, "takes no rule="),
            (lambda: BalancedGRPOTrainer(None, None, args=AggregationGRPOConfig(
                output_dir=str(tmp_path), use_cpu=True, aggregation_rule="token")), ValueError, "is the balanced rule")]:
        with pytest.raises(error, match=match) as refused:
            call()
        assert "\n" not in str(refused.value)


def test_lengths_are_trls_loss_mask_with_tool_results_left_out():
    output = {"completion_mask": torch.ones(2, 5, dtype=torch.long),
              "tool_mask": torch.tensor([[1, 0, 0, 1, 1], [1, 1, 1, 1, 1]])}
    assert loss_mask(output).sum(1).tolist() == [3, 5]
    assert loss_mask({"completion_mask": torch.ones(2, 5)}).sum().item() == 10


def test_each_rules_rescaled_advantages_are_a_times_its_coefficient_times_n():
    lengths, adv = torch.tensor([2.0, 9, 1, 7]), torch.tensor([1.0, -1, 1, -1])
    mask = (torch.arange(9)[None, :] < lengths[:, None]).long()
    n = mask.sum()
    for rule in RULES:
        c = aggregation_coefficients(mask.float(), adv, G, rule)[:, 0]
        assert torch.allclose(rule_advantages(adv, mask, n, G, rule), adv * c * n)
    token = rule_advantages(adv, mask, n, G, "token")                    # one group: c_i = 1 / N, A unchanged
    assert torch.allclose(token, adv)


# =====================================================================================
# An empty response (mask_truncated_completions, overlong masking): it contributes nothing
# =====================================================================================


def test_a_fully_masked_completion_contributes_nothing_not_even_its_advantage_mass_under_balanced():
    """rewards [1, 1, 0, 0], loss-mask lengths [3, 5, 2, 0]: the wrong completion TRL masked keeps
    its advantage in TRL's batch, but under balanced its mass does not move to the 2-token wrong
    one (coefficient 1 / (G * 2), not 1 / G), and TRL's dapo loss with the rescaled advantages is
    J_BA of the group with that completion left out (tests/course/test_empty_response.py)."""
    from grpo_ba import aggregate_balanced, mask_from_lengths
    from grpo_ba_lab.integrations.bias_metrics import bias_metrics
    lengths = torch.tensor([3, 5, 2, 0])
    mask = mask_from_lengths(lengths).long()
    adv = torch.tensor([0.866, 0.866, -0.866, -0.866])                 # TRL's: unbiased std, the masked one included
    n = mask.sum()
    rescaled = rule_advantages(adv, mask, n, G, "balanced")
    assert rescaled[2].item() == pytest.approx(adv[2].item() / (G * 2) * n.item(), rel=1e-6)
    assert rescaled[3].item() == 0
    logp = torch.randn(mask.shape, generator=torch.Generator().manual_seed(0))
    old = logp + 0.3 * torch.randn(mask.shape, generator=torch.Generator().manual_seed(1))
    dapo = (clipped_token_loss(logp, old, rescaled, mask.float()) * mask).sum() / n      # TRL's dapo
    left_out = aggregate_balanced(clipped_token_loss(logp, old, adv, mask.float()), mask.float(),
                                  adv * (lengths > 0), G)
    assert dapo.item() == pytest.approx(left_out.item(), rel=1e-5)
    logged = bias_metrics(adv, lengths.float(), G)                      # sequence's weight per sign, kept
    assert logged["pos_share_balanced"] == pytest.approx(logged["pos_share_sequence"], rel=1e-6)
    assert logged["pos_share_balanced"] == pytest.approx(2 / 3, rel=1e-5)
