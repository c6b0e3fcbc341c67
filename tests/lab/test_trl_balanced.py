"""TRL's GRPOTrainer with grpo_ba_lab.integrations.trl_balanced computes exactly aggregate_balanced."""
import json

import pytest
import torch

trl = pytest.importorskip("trl", reason="TRL is optional: pip install -r requirements/trl.txt")

from datasets import Dataset  # noqa: E402
import trl.trainer.grpo_trainer as trl_grpo  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpo_ba import (AGGREGATORS, aggregate_balanced, aggregate_token, aggregation_coefficients,  # noqa: E402
                     clipped_token_loss, sign_weights, token_logprobs)
from grpo_ba_lab.integrations.trl_balanced import (AggregationGRPOConfig, AggregationGRPOTrainer,  # noqa: E402
                                                   BalancedGRPOTrainer, GRPOTrainerWithBiasMetrics,
                                                   balanced_advantages, check_trl_batch, dump_rollouts)
from toy_tasks.model import char_tokenizer, tiny_qwen3  # noqa: E402


def odd_length_reward(completions, **kwargs):
    return [float(len(c) % 2) for c in completions]


def make_trainer(tmp_path, cls=BalancedGRPOTrainer, loss_type="dapo", callbacks=None, reward=odd_length_reward,
                 evaluate=False, **config):
    tokenizer = char_tokenizer()
    model = tiny_qwen3(tokenizer, seed=0)
    data = Dataset.from_dict({"prompt": ["12+3+4=", "45+6+7=", "30+1+1=", "77+2+9="]})   # equal lengths: no padding
    config_class = AggregationGRPOConfig if issubclass(cls, AggregationGRPOTrainer) else GRPOConfig
    config = config_class(**{**dict(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4,
                                  max_completion_length=10, loss_type=loss_type, beta=0.0, use_cpu=True, report_to=[],
                                  temperature=1.0, logging_steps=1, max_steps=1, save_strategy="no"), **config})
    return cls(model=model, reward_funcs=reward, args=config, train_dataset=data, processing_class=tokenizer,
               callbacks=callbacks, eval_dataset=data if evaluate else None)


@pytest.fixture
def trl_batches(monkeypatch):
    """Every generation batch TRL makes, kept before the trainer rescales it."""
    batches, original = [], GRPOTrainer._generate_and_score_completions

    def recording(self, inputs):
        output = original(self, inputs)
        batches.append({k: v.detach().clone() for k, v in output.items() if isinstance(v, torch.Tensor)})
        return output
    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", recording)
    return batches


def test_trl_loss_and_gradients_equal_aggregate_balanced(tmp_path):
    trainer = make_trainer(tmp_path)
    trainer.model.train()
    rows = [{"prompt": "12+3+4="}] * 4 + [{"prompt": "45+6+7="}] * 4
    torch.manual_seed(0)
    raw = GRPOTrainer._generate_and_score_completions(trainer, rows)
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions(rows)
    assert torch.equal(batch["completion_ids"], raw["completion_ids"])
    adv, mask = raw["advantages"], raw["completion_mask"].float()
    assert (adv > 0).any() and (adv < 0).any() and len(set(mask.sum(1).tolist())) > 1   # a real test case
    assert torch.allclose(batch["advantages"], balanced_advantages(adv, raw["completion_mask"], raw["num_items_in_batch"], 4))

    # off-policy ratios, some beyond the clip range, so the test covers clipping too
    model = trainer.model
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    T = batch["completion_ids"].shape[1]
    with torch.no_grad():
        logp0 = trainer._get_per_token_logps_and_entropies(model, input_ids, attention, T)[0]
    old = logp0 + 0.3 * torch.randn(logp0.shape, generator=torch.Generator().manual_seed(1))
    batch["old_per_token_logps"] = old

    trainer.current_gradient_accumulation_steps = 1          # set by train() in real use
    params = [p for p in model.parameters() if p.requires_grad]
    trl_loss = trainer.compute_loss(model, batch)
    trl_grads = torch.autograd.grad(trl_loss, params)

    logp = trainer._get_per_token_logps_and_entropies(model, input_ids, attention, T)[0]
    token_loss = clipped_token_loss(logp, old, adv, mask, trainer.epsilon_low, trainer.epsilon_high)
    ours = aggregate_balanced(token_loss, mask, adv, 4)
    our_grads = torch.autograd.grad(ours, params)

    assert trl_loss.item() == pytest.approx(ours.item(), rel=1e-5, abs=1e-7)
    for a, b in zip(trl_grads, our_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)


def test_trainer_refuses_a_loss_type_it_cannot_rescale(tmp_path):
    with pytest.raises(ValueError, match="dapo"):
        make_trainer(tmp_path, loss_type="grpo")
    with pytest.raises(TypeError, match="AggregationGRPOConfig"):                   # a plain GRPOConfig
        BalancedGRPOTrainer(model=tiny_qwen3(char_tokenizer(), seed=0), reward_funcs=odd_length_reward,
                            args=GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[]))


def test_a_trl_whose_generation_batch_lacks_what_ba_reads_is_named_in_one_line():
    with pytest.raises(RuntimeError, match="no num_items_in_batch: .* tested with trl 1.16") as refused:
        check_trl_batch({"advantages": torch.zeros(2), "completion_mask": torch.ones(2, 3)})
    assert "\n" not in str(refused.value)
    check_trl_batch({"advantages": None, "completion_mask": None, "num_items_in_batch": None})


def test_balanced_trainer_trains_a_step(tmp_path):
    trainer = make_trainer(tmp_path)
    trainer.train()
    assert trainer.state.global_step == 1


@pytest.mark.parametrize("cls, loss_type", [(BalancedGRPOTrainer, "dapo"), (GRPOTrainerWithBiasMetrics, "grpo")])
def test_bias_metrics_appear_in_trls_logs_with_the_values_sign_weights_gives(tmp_path, trl_batches, cls, loss_type):
    trainer = make_trainer(tmp_path, cls=cls, loss_type=loss_type)
    trainer.train()
    (batch,) = trl_batches
    adv, mask = batch["advantages"], batch["completion_mask"].float()
    assert (adv > 0).any() and (adv < 0).any() and len(set(mask.sum(1).tolist())) > 1   # a real test case
    logged = trainer.state.log_history[0]                          # what console / W&B / TensorBoard receive
    for rule in AGGREGATORS:
        w_pos, w_neg = sign_weights(mask, adv, 4, rule)
        assert logged[f"aggregation/pos_share_{rule}"] == pytest.approx((w_pos.abs() / (w_pos.abs() + w_neg.abs())).item(), rel=1e-5)
    zero = torch.zeros(mask.shape)
    drift = aggregate_token(clipped_token_loss(zero, zero, adv, mask), mask, adv, 4).item()
    assert logged["aggregation/token_loss_at_ratio_one"] == pytest.approx(drift, rel=1e-5, abs=1e-7)
    assert logged["aggregation/pos_share_sequence"] == pytest.approx(0.5, abs=1e-5)   # binary rewards: each sign gets half
    assert logged["aggregation/pos_share_token"] != pytest.approx(0.5)                # lengths differ: token does not


class GradientRecorder(TrainerCallback):
    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("accumulation, steps_per_generation", [(2, 2), (1, 2)])
def test_optimizer_step_gradient_composes_with_accumulation_and_steps_per_generation(
        tmp_path, trl_batches, monkeypatch, accumulation, steps_per_generation):
    """First optimizer step = (spg / GA) * grad of the rows it sees of J_BA taken over the whole
    generation batch (the module docstring); with GA = spg that is grad J_BA itself."""
    monkeypatch.setattr(trl_grpo, "shuffle_sequence_dict", lambda batch: batch)   # slices = rows in order
    recorder = GradientRecorder()
    trainer = make_trainer(tmp_path, callbacks=[recorder], per_device_train_batch_size=6, bf16=False,
                           gradient_accumulation_steps=accumulation, steps_per_generation=steps_per_generation,
                           max_grad_norm=0.0)
    trainer.train()
    (batch,) = trl_batches                                         # 12 rows: 3 groups of 4, in 2 slices of 6
    adv, mask = batch["advantages"], batch["completion_mask"].float()
    assert (adv > 0).any() and (adv < 0).any() and len(set(mask.sum(1).tolist())) > 2
    model = tiny_qwen3(char_tokenizer(), seed=0)                   # the weights before the step
    width = batch["completion_ids"].shape[1]
    sequences = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    logp = token_logprobs(model, sequences, attention, width)[0]                      # (12, T)
    token_loss = clipped_token_loss(logp, logp.detach(), adv, mask)                   # ratio 1 at the first step
    coefficients = aggregation_coefficients(mask, adv, 4, "balanced")                 # over the whole batch
    seen = slice(0, 6 * accumulation)                                                 # the GA slices of step 1
    objective = steps_per_generation / accumulation * (coefficients * token_loss)[seen].sum()
    if accumulation == steps_per_generation:
        assert objective.item() == pytest.approx(aggregate_balanced(token_loss, mask, adv, 4).item(), abs=1e-6)
    names, params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad])
    for name, grad in zip(names, torch.autograd.grad(objective, params)):
        assert torch.allclose(recorder.grads[name], grad, rtol=1e-4, atol=1e-7), name


def test_diagnose_uses_the_unbiased_std_of_a_trl_dump_and_gives_what_trl_logged(tmp_path):
    from grpo_ba_lab.analysis import diagnose
    path = str(tmp_path / "rollouts.jsonl")
    trainer = make_trainer(tmp_path, reward=dump_rollouts(odd_length_reward, path, num_generations=4), max_steps=2)
    trainer.train()
    lines = open(path).read().splitlines()
    assert len(lines) == 2 * 8 and {json.loads(line)["group"] for line in lines} == {"0-0", "0-1", "1-0", "1-1"}
    rows = [json.loads(line) for line in lines]
    assert [row["step"] for row in rows] == [0] * 8 + [1] * 8          # TRL's global_step
    assert len({row["run"] for row in rows}) == 1
    png = tmp_path / "bias.png"
    assert diagnose.main([path, "--figure", str(png)]) == 0            # on TRL's own dump
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first_batch = tmp_path / "first.jsonl"
    first_batch.write_text("\n".join(lines[:8]) + "\n")
    report = diagnose.diagnose(str(first_batch))
    logged = trainer.state.log_history[0]
    assert (report["adv_scale"], report["std"], report["eps"]) == ("std", "unbiased", 1e-4)   # from the dump
    for key in [f"pos_share_{rule}" for rule in AGGREGATORS] + ["token_loss_at_ratio_one"]:
        assert report[key] == pytest.approx(logged[f"aggregation/{key}"], rel=1e-5, abs=1e-7), key
    # the control: the same lines read with grpo_ba's population std give a drift sqrt(G/(G-1)) larger
    course = tmp_path / "population.jsonl"
    course.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k not in ("std", "eps")}) + "\n"
                              for line in lines[:8]))
    ratio = diagnose.diagnose(str(course))["token_loss_at_ratio_one"] / logged["aggregation/token_loss_at_ratio_one"]
    assert report["token_loss_at_ratio_one"] != 0 and ratio == pytest.approx((4 / 3) ** 0.5, rel=1e-3)


def test_a_real_trl_grpo_run_dumps_its_loss_type_and_diagnose_does_not_call_it_token(tmp_path):
    """Issue 76, fifth practitioner: TRL's own dump of a loss_type="grpo" run (per sequence) read "try balanced
    in place of token aggregation". Its lines now say loss_type "grpo", and diagnose names that rule."""
    from grpo_ba_lab.analysis import diagnose
    path = str(tmp_path / "rollouts.jsonl")
    trainer = make_trainer(tmp_path, cls=GRPOTrainerWithBiasMetrics, loss_type="grpo",
                           reward=dump_rollouts(odd_length_reward, path, num_generations=4))
    trainer.train()
    rows = [json.loads(line) for line in open(path)]
    assert rows and {row["loss_type"] for row in rows} == {"grpo"} and not any("aggregation_rule" in r for r in rows)
    placed = diagnose.placement_batch(path, diagnose.read_lines(path)[0])
    assert placed.trained.family == "sequence" and "loss_type='grpo'" in placed.trained.said
    kind, line = diagnose.recommendation(diagnose.registered_designs(), (2.0, 2.5), 32, 0.0, (32, 32), 0,
                                         trained=placed.trained)   # its rule, at a ratio the designs cover
    assert "in place of token" not in line and "balanced - sequence" in line and kind.endswith("trains with sequence")


def test_dumped_lengths_are_trls_loss_mask_so_a_masked_truncated_completion_is_zero(tmp_path, trl_batches):
    path = str(tmp_path / "rollouts.jsonl")
    trainer = make_trainer(tmp_path, reward=dump_rollouts(odd_length_reward, path, num_generations=4),
                           mask_truncated_completions=True, max_completion_length=4)
    trainer.train()
    (batch,) = trl_batches
    dumped = [json.loads(line)["length"] for line in open(path)]
    lengths = batch["completion_mask"].sum(1).tolist()
    truncated = (~(batch["completion_ids"] == trainer.processing_class.eos_token_id).any(1)).tolist()   # no EOS
    assert any(truncated) and not all(truncated)                                 # a real test case
    assert dumped == lengths and all(n == 0 for n, cut in zip(dumped, truncated) if cut)


def test_diagnose_reads_a_masked_trl_dump_over_the_responses_in_the_loss(tmp_path, capsys):
    """Issue 76: TRL's mask_truncated_completions leaves the truncated completions at length 0. diagnose
    takes the ratio, the spread and the shares over the others, prints how many had length 0, and claims
    the identity note only where it holds; recomputed here in plain Python from the dump."""
    import statistics
    from grpo_ba_lab.analysis import diagnose
    path = str(tmp_path / "rollouts.jsonl")
    trainer = make_trainer(tmp_path, reward=dump_rollouts(odd_length_reward, path, num_generations=4),
                           mask_truncated_completions=True, max_completion_length=4)
    trainer.train()
    rows = [json.loads(line) for line in open(path)]
    assert diagnose.main([path]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    advantages = {}                                                    # TRL's: unbiased std + 1e-4
    for group in {row["group"] for row in rows}:
        members = [row for row in rows if row["group"] == group]
        rewards = [row["reward"] for row in members]
        spread = statistics.stdev(rewards) + 1e-4
        for at, row in enumerate(members):
            advantages[group, at] = (row["reward"] - statistics.fmean(rewards)) / spread
    signed = [(advantages[row["group"], [r for r in rows if r["group"] == row["group"]].index(row)], row["length"])
              for row in rows]
    kept = [n for _, n in signed if n > 0]
    zero = sum(1 for _, n in signed if n == 0)
    assert zero > 0 and any(a != 0 for a, n in signed if n == 0)       # a real case: a masked one with an advantage
    assert summary["n_length_zero"] == zero and f"responses of length 0 (no token in the loss, e.g. masked " \
        f"truncations): {zero} of {len(rows)}" in out
    assert summary["std_over_mean"] == pytest.approx(statistics.pstdev(kept) / statistics.fmean(kept), rel=1e-5)
    pos = [n for a, n in signed if a > 0 and n > 0]
    neg = [n for a, n in signed if a < 0 and n > 0]
    if pos and neg:
        assert summary["neg_over_pos"] == pytest.approx(statistics.fmean(neg) / statistics.fmean(pos), rel=1e-5)
    # the identity holds only if every group's advantages in the loss still sum to 0
    cancels = all(abs(sum(advantages[g, at] for at, row in enumerate([r for r in rows if r["group"] == g])
                          if row["length"] > 0)) < 1e-6 for g in {row["group"] for row in rows})
    assert not cancels                                                  # masking broke it here: the note must go
    assert summary["shares_are_identities"] is cancels
    assert ("identities here" in out) is cancels and "no identity here" in out
    logged = trainer.state.log_history[0]                               # the shares: what TRL logged for the batch
    for key in [f"pos_share_{rule}" for rule in AGGREGATORS]:
        if logged.get(f"aggregation/{key}") is not None and summary[key] is not None:
            assert summary[key] == pytest.approx(logged[f"aggregation/{key}"], rel=1e-5, abs=1e-7), key
    # the decision: step 0's masked completions with an advantage, counted as recomputed here, and the run is
    # not placed (no registered design masks any; no ratio, or the sample's refusals, if any, come first)
    first = min(row["step"] for row in rows)
    masked = sum(1 for row, (a, n) in zip(rows, signed) if row["step"] == first and n == 0 and a != 0)
    decision = summary["decision"]
    assert decision["step"] == first == 0 and decision["masked_with_advantage"] == masked
    if masked:
        assert decision["recommendation"] in (*diagnose.NOT_PLACED, "none") and decision["worlds"] == []


def test_dump_rollouts_in_a_plain_grpo_trainer_is_refused_in_one_line(tmp_path):
    path = str(tmp_path / "rollouts.jsonl")
    trainer = make_trainer(tmp_path, cls=GRPOTrainer, reward=dump_rollouts(odd_length_reward, path, num_generations=4))
    with pytest.raises(RuntimeError, match="loss mask.*BiasMetricsMixin") as err:
        trainer.train()
    assert "\n" not in str(err.value)


def test_dump_rollouts_beside_another_reward_function_is_refused_at_start(tmp_path):
    """TRL's advantages come from every reward function; the dump records only the one it wraps."""
    path = str(tmp_path / "rollouts.jsonl")
    with pytest.raises(ValueError, match="records the rewards of the one function it wraps") as err:
        make_trainer(tmp_path, reward=[dump_rollouts(odd_length_reward, path, num_generations=4), odd_length_reward])
    assert "\n" not in str(err.value)


def test_an_evaluations_rollouts_are_not_dumped_as_training_rows(tmp_path):
    """eval_on_start generates and scores a batch in eval mode: no update uses it, so the dump
    holds the training batches alone (those of step 0 only, here)."""
    path = tmp_path / "rollouts.jsonl"
    trainer = make_trainer(tmp_path, reward=dump_rollouts(odd_length_reward, str(path), num_generations=4),
                           evaluate=True, eval_strategy="steps", eval_steps=1, eval_on_start=True,
                           per_device_eval_batch_size=8)
    trainer.train()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 8 and {line["step"] for line in lines} == {0}


def test_dumped_lines_carry_trls_global_step_and_a_new_run_id_for_each_new_trainer_state(tmp_path):
    from transformers import TrainerState
    from types import SimpleNamespace
    path = tmp_path / "rollouts.jsonl"
    dumping = dump_rollouts(odd_length_reward, str(path), num_generations=2)
    dumping.attach(SimpleNamespace(args=SimpleNamespace(scale_rewards="group")))   # as BiasMetricsMixin does
    batch = dict(prompts=["1+1="] * 4, completions=["2", "22", "3", "33"],
                 completion_ids=[[5], [5, 5], [6], [6, 6]])
    first = TrainerState(global_step=7)
    assert dumping(**batch, trainer_state=first) == [1.0, 0.0, 1.0, 0.0]    # the rewards, unchanged
    dumping.write([1, 2, 1, 2])                                           # the loss mask's lengths
    first.global_step = 9                                                 # spg > GA: steps skip
    dumping(**batch, trainer_state=first)
    dumping.write([1, 2, 1, 2])
    dumping(**batch, trainer_state=TrainerState(global_step=0))           # a new train()
    dumping.write([1, 2, 1, 2])
    rows = [json.loads(line) for line in open(path)]
    assert [row["step"] for row in rows] == [7] * 4 + [9] * 4 + [0] * 4
    assert [row["group"] for row in rows] == ["0-0", "0-0", "0-1", "0-1", "1-0", "1-0", "1-1",
                                              "1-1", "0-0", "0-0", "0-1", "0-1"]
    runs = [row["run"] for row in rows]
    assert len(set(runs[:8])) == 1 and len(set(runs[8:])) == 1 and runs[0] != runs[8]
    assert [row["length"] for row in rows[:4]] == [1, 2, 1, 2]
    assert {(row["adv_scale"], row["std"], row["eps"]) for row in rows} == {("std", "unbiased", 1e-4)}


@pytest.mark.parametrize("config, family", [(dict(loss_type="grpo"), "sequence"), (dict(loss_type="dapo"), "token"),
                                            (dict(loss_type="dapo", aggregation_rule="balanced"), "balanced")])
def test_the_dump_records_the_rule_the_run_trains_with_and_diagnose_names_it(tmp_path, config, family):
    """Issue 76, fifth practitioner: a TRL dump with loss_type="grpo" (per sequence) was told "try balanced in
    place of token aggregation". The dump records TRL's loss_type (and aggregation_rule where the config has one)."""
    from types import SimpleNamespace

    from transformers import TrainerState

    from grpo_ba_lab.analysis import diagnose
    path = tmp_path / "rollouts.jsonl"
    dumping = dump_rollouts(odd_length_reward, str(path), num_generations=2)
    dumping.attach(SimpleNamespace(args=SimpleNamespace(scale_rewards="group", **config)))
    dumping(prompts=["1+1="] * 4, completions=["2", "22", "3", "33"], completion_ids=[[5], [5, 5], [6], [6, 6]],
            trainer_state=TrainerState(global_step=0))
    dumping.write([1, 2, 1, 2])
    rows = [json.loads(line) for line in open(path)]
    assert all({key: row.get(key) for key in config} == config for row in rows)
    lines = diagnose.read_lines(str(path))[0]
    assert diagnose.trained_rule(str(path), lines).family == family


def test_two_trl_runs_dumped_to_one_file_are_diagnosed_as_two_runs_not_merged(tmp_path, capsys):
    """One wrapper, two trainers, one file: each train() gets its own run id and group ids
    from "0-0", and diagnose reads each run as the batch its trainer logged."""
    from grpo_ba_lab.analysis import diagnose
    path = str(tmp_path / "rollouts.jsonl")
    dumping = dump_rollouts(odd_length_reward, path, num_generations=4)
    logged = []
    for seed in (0, 1):
        trainer = make_trainer(tmp_path, reward=dumping, seed=seed)
        trainer.train()
        logged.append(trainer.state.log_history[0])
    rows = [json.loads(line) for line in open(path)]
    runs = list(dict.fromkeys(row["run"] for row in rows))
    assert len(rows) == 16 and len(runs) == 2
    assert [row["group"] for row in rows[:8]] == [row["group"] for row in rows[8:]]   # ids restart
    capsys.readouterr()                                                # TRL's progress bars
    assert diagnose.main([path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(run in err for run in runs) and "--run" in err
    for run, trl_logged in zip(runs, logged):
        report = diagnose.diagnose(path, run_id=run)
        assert report["n_groups"] == 2 and report["group_size"] == 4 and report["run"] == run
        for rule in AGGREGATORS:
            key = f"pos_share_{rule}"
            assert report[key] == pytest.approx(trl_logged[f"aggregation/{key}"], rel=1e-5), (run, rule)


# =====================================================================================
# Issue 76's last defects: the dump's group size is the trainer's, its adv_scale what TRL used
# =====================================================================================


def test_dump_rollouts_takes_the_trainers_num_generations_and_refuses_another_in_one_line(tmp_path):
    """A num_generations unlike the trainer's would cut TRL's groups apart (or merge them), and diagnose
    would read wrong groups: refused when the trainer is built; left out, it is the trainer's."""
    path = str(tmp_path / "rollouts.jsonl")
    with pytest.raises(ValueError, match=r"dump_rollouts\(num_generations=2\) in a trainer with "
                                         r"num_generations=4") as err:
        make_trainer(tmp_path, reward=dump_rollouts(odd_length_reward, path, num_generations=2))
    assert "\n" not in str(err.value) and "pass num_generations=4" in str(err.value)
    trainer = make_trainer(tmp_path, reward=dump_rollouts(odd_length_reward, path))
    trainer.train()
    rows = [json.loads(line) for line in open(path)]
    assert [row["group"] for row in rows] == ["0-0"] * 4 + ["0-1"] * 4          # TRL's groups of 4


def test_the_dump_records_the_advantage_scale_trl_used_never_std_by_default():
    from types import SimpleNamespace
    from grpo_ba_lab.integrations.trl_balanced import trl_adv_scale
    args = SimpleNamespace(multi_objective_aggregation="sum_then_normalize", scale_rewards="group")
    assert trl_adv_scale(args) == "std"
    assert [trl_adv_scale(SimpleNamespace(**{**vars(args), "scale_rewards": s})) for s in ("none", "batch", "later")] \
        == ["none", "batch", "later"]                              # a scale TRL adds later: as it is, not "std"
    for scale in ("group", "none", "batch"):                       # normalize_then_sum ignores scale_rewards
        assert trl_adv_scale(SimpleNamespace(multi_objective_aggregation="normalize_then_sum",
                                             scale_rewards=scale)) == "normalize_then_sum"


def test_a_normalize_then_sum_dump_says_so_and_diagnose_reads_it_as_trl_logged(tmp_path, capsys):
    from grpo_ba_lab.analysis import diagnose
    path = str(tmp_path / "rollouts.jsonl")
    trainer = make_trainer(tmp_path, reward=dump_rollouts(odd_length_reward, path),
                           multi_objective_aggregation="normalize_then_sum")
    trainer.train()
    rows = [json.loads(line) for line in open(path)]
    assert {row["adv_scale"] for row in rows} == {"normalize_then_sum"}
    capsys.readouterr()
    assert diagnose.main([path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--adv-scale std" in err
    report = diagnose.diagnose(path, adv_scale="std")
    assert report["trainer_adv_scale"] == "normalize_then_sum"
    logged = trainer.state.log_history[0]
    assert report["pos_share_token"] is not None                      # a real case: a group with a signal
    for key in [f"pos_share_{rule}" for rule in AGGREGATORS]:
        assert report[key] == pytest.approx(logged[f"aggregation/{key}"], rel=1e-4, abs=1e-6), key


def test_diagnose_does_not_place_a_trl_dump_with_partial_credit_rewards(tmp_path, capsys):
    """Issue 76 (a fourth practitioner): a partial-credit reward, common in practice, is not 0 or 1, and
    every registered design has binary rewards, so TRL's own dump of such a run is not placed."""
    from grpo_ba_lab.analysis import diagnose

    def partial_credit(completions, **kwargs):
        return [float(len(c) % 3) / 2 for c in completions]                     # 0, 0.5 or 1
    path = str(tmp_path / "rollouts.jsonl")
    make_trainer(tmp_path, reward=dump_rollouts(partial_credit, path, num_generations=4)).train()
    rewards = [json.loads(line)["reward"] for line in open(path)]
    graded = sum(1 for r in rewards if r not in (0, 1))
    assert graded > 0                                                          # a real case
    assert diagnose.main([path]) == 0
    decision = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["decision"]
    assert (decision["graded_rewards"], decision["recommendation"]) == (graded, "graded rewards")
    assert set(decision["designs"].values()) == {"not placed"}
