"""AggregationGRPOTrainer, each rule, in two processes (torchrun, CPU, gloo) equals one process
on the gathered batch: grpo_ba's aggregate of that rule."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from grpo_ba import (AGGREGATORS, aggregate_token, aggregation_coefficients, clipped_token_loss, sign_weights,
                     token_logprobs)
from grpo_ba_lab.analysis import diagnose
from toy_tasks.model import char_tokenizer, tiny_qwen3

if importlib.util.find_spec("trl") is None:          # the workers import it; this process need not
    pytest.skip("TRL is optional: pip install -r requirements/trl.txt", allow_module_level=True)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(REPO, "tests", "lab", "trl_multiprocess_worker.py")
GROUP, PROCESSES = 4, 2


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Run the worker under torchrun (`python -m torch.distributed.run`, torchrun's own entry
    point, so no PATH lookup) and load what each process saved."""
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("this torch build has no gloo backend: torchrun cannot start CPU processes")
    out = tmp_path_factory.mktemp("torchrun")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={PROCESSES}",
               WORKER, str(out)]
    done = subprocess.run(command, cwd=str(out), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(PROCESSES)]


RULES = tuple(AGGREGATORS)


def runs_of(ranks, rule):
    """Each process's record of the run of `rule`, with its rank."""
    return [{**r["runs"][rule], "rank": r["rank"], "world": r["world"]} for r in ranks]


def test_every_process_trained_each_rule_from_the_same_start(ranks):
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["world"] == PROCESSES for r in ranks)
    for r in ranks:
        assert [r["runs"][rule]["rule"] for rule in RULES] == list(RULES)
        first = r["runs"][RULES[0]]["completion_ids"]
        assert all(torch.equal(r["runs"][rule]["completion_ids"], first) for rule in RULES)   # same seed, batch


def gathered(ranks):
    """The global generation batch in TRL's layout (process 0's rows, then process 1's),
    completions right-padded to one width."""
    width = max(r["completion_mask"].shape[1] for r in ranks)
    mask = torch.cat([F.pad(r["completion_mask"], (0, width - r["completion_mask"].shape[1])) for r in ranks]).float()
    advantages = torch.cat([r["advantages"] for r in ranks])
    return mask, advantages


def test_torchrun_batch_is_a_real_test_case(ranks):
    mask, advantages = gathered(runs_of(ranks, "balanced"))
    totals = mask.sum(1).view(-1, GROUP).sum(1)
    assert len(set(totals.tolist())) > 1            # TRL's pooled token mean is not the per-group one here
    spanning = advantages[4:8]                      # group 1: two rows on each process
    assert (spanning != 0).any() and len(set(mask.sum(1).tolist())) > 2
    assert (advantages > 0).any() and (advantages < 0).any()


@pytest.mark.parametrize("rule", RULES)
def test_every_process_rescales_advantages_as_one_process_on_the_gathered_batch(ranks, rule):
    ranks = runs_of(ranks, rule)
    mask, advantages = gathered(ranks)
    n_tokens = mask.sum()
    coefficients = aggregation_coefficients(mask, advantages, GROUP, rule)[:, 0]      # c_i over all 12 rows
    one_process = advantages * coefficients * n_tokens                               # A'_i = A_i c_i N
    per_process = len(ranks[0]["advantages"])
    for r in ranks:
        assert r["num_items_in_batch"].item() == n_tokens.item()                     # TRL's N is global
        local = one_process[r["rank"] * per_process:(r["rank"] + 1) * per_process]
        assert torch.allclose(r["rescaled_advantages"], local, rtol=1e-5, atol=1e-7), r["rank"]


@pytest.mark.parametrize("rule", RULES)
def test_two_process_gradient_equals_the_one_process_gradient_of_the_rule(ranks, rule):
    """DDP's averaged gradient after one step = grad of grpo_ba's aggregate of the rule on all 12 completions."""
    ranks = runs_of(ranks, rule)
    mask, advantages = gathered(ranks)
    model = tiny_qwen3(char_tokenizer(), seed=0)                  # the workers' initial weights
    token_losses = []
    for r in ranks:                                                # each process's own padding width
        width = r["completion_ids"].shape[1]
        sequences = torch.cat([r["prompt_ids"], r["completion_ids"]], 1)
        attention = torch.cat([r["prompt_mask"], r["completion_mask"]], 1)
        logp = token_logprobs(model, sequences, attention, width)[0]                 # (B_local, T_r)
        loss = clipped_token_loss(logp, logp.detach(), r["advantages"], r["completion_mask"])   # on-policy
        token_losses.append(F.pad(loss, (0, mask.shape[1] - width)))
    objective = AGGREGATORS[rule](torch.cat(token_losses), mask, advantages, GROUP)
    names, params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad])
    expected = dict(zip(names, torch.autograd.grad(objective, params)))
    for r in ranks:
        assert r["grads"].keys() == expected.keys()
        for name, grad in expected.items():
            assert torch.allclose(r["grads"][name], grad, rtol=1e-4, atol=1e-7), (r["rank"], name)


@pytest.mark.parametrize("rule", RULES)
def test_every_process_logs_the_bias_of_the_gathered_batch(ranks, rule):
    ranks = runs_of(ranks, rule)
    mask, advantages = gathered(ranks)
    expected = {}
    for rule in AGGREGATORS:
        w_pos, w_neg = sign_weights(mask, advantages, GROUP, rule)
        expected[f"pos_share_{rule}"] = (w_pos.abs() / (w_pos.abs() + w_neg.abs())).item()
    zero = torch.zeros(mask.shape)
    expected["token_loss_at_ratio_one"] = aggregate_token(clipped_token_loss(zero, zero, advantages, mask),
                                                          mask, advantages, GROUP).item()
    for r in ranks:
        logged = r["logs"][0]
        for key, value in expected.items():
            assert logged[f"aggregation/{key}"] == pytest.approx(value, rel=1e-5, abs=1e-7), (r["rank"], key)


@pytest.mark.parametrize("rule", RULES)
def test_the_processes_rollout_dumps_concatenate_into_one_run_that_diagnoses_as_the_logged_batch(
        ranks, tmp_path, rule):
    ranks = runs_of(ranks, rule)
    lines = ranks[0]["rollouts"] + ranks[1]["rollouts"]            # cat rollouts.jsonl.rank0 .rank1
    rows = [json.loads(line) for line in lines]
    assert len({row["run"] for row in rows}) == 1                   # one id for the distributed run
    assert [row["group"] for row in rows] == ["0-0"] * 4 + ["0-1"] * 4 + ["0-2"] * 4
    assert {row["step"] for row in rows} == {0}
    path = tmp_path / "rollouts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    report = diagnose.diagnose(str(path))                           # one run: no --run needed
    assert report["n_groups"] == 3 and report["group_size"] == GROUP
    assert (report["std"], report["eps"]) == ("unbiased", 1e-4)      # TRL's advantages, as the dump records them
    for key in [f"pos_share_{rule}" for rule in AGGREGATORS] + ["token_loss_at_ratio_one"]:
        assert report[key] == pytest.approx(ranks[0]["logs"][0][f"aggregation/{key}"], rel=1e-4, abs=1e-6), key
