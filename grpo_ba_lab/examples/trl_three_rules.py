"""The paper's comparison in TRL: the three aggregation rules (token, sequence, balanced, each
per group) trained from the same start and seed on a tiny Qwen3 built here (nothing is
downloaded); each run's rollouts are written, and the three runs' bias metrics are printed
side by side by grpo_ba_lab.analysis.diagnose (docs/trl.md).

    pip install .[trl]             # or: pip install -r requirements.txt -r requirements/trl.txt
    python grpo_ba_lab/examples/trl_three_rules.py                    # 3 steps per rule, CPU, under a minute
    python grpo_ba_lab/examples/trl_three_rules.py --steps 20 --out my_comparison
    python -m grpo_ba_lab.analysis.diagnose three_rules/rollouts-token.jsonl --figure token.png

The reward is lenient on purpose: 1 when the gold answer appears anywhere in the completion,
so that a model with random weights gets a signal in most groups (verifier.py's exact check
gives it almost none), and longer completions are likelier to be right. On your own model:
replace `tiny_qwen3(...)` by your model, the prompts by your data and `mentions_answer` by
your reward (verifier.verify, say); everything else (one AggregationGRPOTrainer per rule, dump_rollouts,
diagnose) stays. The last line printed is one JSON object: {rule: diagnose's summary}.
"""
import argparse
import json
import os

from datasets import Dataset
from trl import GRPOConfig

from grpo_ba_lab.analysis import diagnose
from grpo_ba_lab.integrations.trl_balanced import RULES, AggregationGRPOTrainer, dump_rollouts
from toy_tasks.model import char_tokenizer, tiny_qwen3

GROUP = 8                                             # G: responses per prompt
PROMPTS_PER_STEP = 4                                  # P: groups per generation batch
PROMPTS = {"1+1=": "2", "2+3=": "5", "4+4=": "8", "3+3=": "6", "1+2=": "3", "2+2=": "4", "0+5=": "5", "3+4=": "7"}
SHOWN = (("pos_share_token", "share of weight on positives, token", ".3f"),
         ("pos_share_sequence", "share of weight on positives, sequence", ".3f"),
         ("pos_share_balanced", "share of weight on positives, balanced", ".3f"),
         ("token_loss_at_ratio_one", "token rule's loss at ratio 1", "+.4f"),
         ("len_pos", "mean length of positive responses", ".2f"),
         ("len_neg", "mean length of negative responses", ".2f"),
         ("n_groups", "groups", "d"),
         ("groups_without_signal", "groups without signal (all tied)", "d"))


def mentions_answer(completions, answer, **kwargs):   # TRL passes the dataset's other columns by name
    return [float(gold in completion) for completion, gold in zip(completions, answer)]


def train_rule(rule, steps, out):
    """One run of `rule` from the same weights (seed 0) and TRL seed; -> its rollouts file."""
    rollouts = os.path.join(out, f"rollouts-{rule}.jsonl")
    if os.path.exists(rollouts):
        os.remove(rollouts)                       # dump_rollouts appends: one run per file here
    tokenizer = char_tokenizer()                  # one token per character of the toy's digits
    model = tiny_qwen3(tokenizer, seed=0)         # ~130k parameters, random weights: the same start
    data = Dataset.from_dict({"prompt": list(PROMPTS), "answer": list(PROMPTS.values())})
    config = GRPOConfig(output_dir=os.path.join(out, f"run-{rule}"), loss_type="dapo", num_generations=GROUP,
                        per_device_train_batch_size=PROMPTS_PER_STEP * GROUP, max_completion_length=8, max_steps=steps, seed=0,
                        learning_rate=1e-2, use_cpu=True, report_to="none", save_strategy="no", logging_steps=1)
    trainer = AggregationGRPOTrainer(rule=rule, model=model, processing_class=tokenizer, args=config,
                                     train_dataset=data,
                                     reward_funcs=dump_rollouts(mentions_answer, rollouts, num_generations=GROUP))
    trainer.train()
    return rollouts


def fmt(value, spec):
    """A number as `spec`, or n/a (None or NaN: no group with a signal)."""
    return "n/a" if value is None or value != value else format(value, spec)


def mean_reward(path):
    rewards = [json.loads(line)["reward"] for line in open(path)]
    return sum(rewards) / len(rewards)


def side_by_side(summaries, rewards):
    """diagnose's numbers of each run, one column per rule trained."""
    width = max(len(label) for _, label, _ in SHOWN)
    lines = [f"{'rule trained:':<{width}}  " + "".join(f"{rule:>10s}" for rule in summaries),
             f"{'mean reward':<{width}}  " + "".join(f"{rewards[rule]:>10.3f}" for rule in summaries)]
    for key, label, spec in SHOWN:
        cells = [fmt(summaries[rule][key], spec) for rule in summaries]
        lines.append(f"{label:<{width}}  " + "".join(f"{cell:>10s}" for cell in cells))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Train token, sequence and balanced aggregation from one start "
                                                 "in TRL and print the three runs' bias side by side.")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per rule")
    parser.add_argument("--out", default="three_rules", help="folder for the rollouts and TRL's run folders")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    files = {rule: train_rule(rule, args.steps, args.out) for rule in RULES}
    first_batches = {rule: [(row["length"], row["reward"]) for row in map(json.loads, open(path)) if row["step"] == 0]
                     for rule, path in files.items()}
    same_start = all(batch == first_batches[RULES[0]] for batch in first_batches.values())
    summaries = {rule: diagnose.diagnose(path) for rule, path in files.items()}   # each run's file as one batch
    print(f"\nThe three runs' rollouts ({args.steps} steps each, P x G = {PROMPTS_PER_STEP} x {GROUP} per step), "
          "read by python -m grpo_ba_lab.analysis.diagnose:")
    print(side_by_side(summaries, {rule: mean_reward(path) for rule, path in files.items()}))
    print(f"step 0's rollouts are the same in the three runs (same start and seed): {'yes' if same_start else 'no'}")
    for path in files.values():
        print(f"wrote {path}")
    print(json.dumps({rule: {"mean_reward": mean_reward(files[rule]),
                             **{key: None if summaries[rule][key] != summaries[rule][key] else summaries[rule][key]
                                for key, _, _ in SHOWN}} for rule in RULES}))

if __name__ == "__main__":
    main()
