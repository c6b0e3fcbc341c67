"""The paper's comparison in TRL: the three aggregation rules (token, sequence, balanced, each
per group) trained from the same start and seed on a tiny Qwen3 built here (nothing is
downloaded); each run's rollouts are written, the three runs' bias metrics are printed side by
side by grpo_ba_lab.analysis.diagnose, and the run ends with what it measured (docs/trl.md).

    pip install -r requirements.txt -r requirements/trl.txt        # or: pip install .[trl]
    python -m grpo_ba_lab.examples.trl_three_rules                    # from the clone's top folder; 3 steps: a smoke test
    python -m grpo_ba_lab.examples.trl_three_rules --steps 60 --out my_comparison
    python -m grpo_ba_lab.examples.trl_three_rules --start warmup     # the paper's situation: long wrong answers
    python -m grpo_ba_lab.analysis.diagnose three_rules/rollouts-token.jsonl --figure token.png

`python -m` from the clone's top folder puts the clone on the path, so the requirements alone
suffice (the examples are not part of an installed package).

Two starts. `--start random` (the default): a tiny Qwen3 with random weights and a lenient
reward, 1 when the gold answer appears anywhere in the completion, so that random weights get a
signal in most groups (verifier.py's exact check gives them almost none); longer completions are
likelier to be right, so wrong answers come out *shorter* than right ones, the opposite of the
paper's situation. `--start warmup`: the course demo's shipped warm-up
(toy_tasks/warmups/demo-s22.safetensors, checked by its sha256: strong-band's world, where a slip
rambles), the toy's own prompts and verifier.py's exact check, up to 48 tokens: wrong answers are
longer than right ones at step 0, the situation that hurts token aggregation by the paper's abstract
and the summaries of it (docs/method.md §6; the full text was not available here);
the run prints the ratio it measured (this start, and P = 16, were chosen after seeing step 0
of other tries: docs/trl.md lists them). On your own model:
replace `tiny_qwen3(...)` by your model, the prompts by your data and `mentions_answer` by
your reward (verifier.verify, say); everything else (one AggregationGRPOConfig per rule,
AggregationGRPOTrainer, dump_rollouts, diagnose) stays. TRL's own logs are off unless
--verbose. It ends with what the run shows about each bias and what to do with it: diagnose's
decision on the token run's rollouts (where step 0 sits against the toy's registered designs,
and its recommendation, scoped to them). The last line printed is one JSON object:
{rule: diagnose's summary, TRL's first loss}.
"""
import argparse
import json
import os
import warnings

from datasets import Dataset

from grpo_ba_lab.analysis import diagnose
from grpo_ba_lab.integrations.trl_balanced import RULES, AggregationGRPOConfig, AggregationGRPOTrainer, dump_rollouts
from toy_tasks.arithmetic import make_problems
from toy_tasks.designs import shipped_warmup
from toy_tasks.model import char_tokenizer, load_warmup_file, tiny_qwen3
from verifier import verify

GROUP = 8                                             # G: responses per prompt
SMOKE_TEST_BELOW = 50                                 # fewer steps per rule: the rewards are not compared
PROMPTS = {"1+1=": "2", "2+3=": "5", "4+4=": "8", "3+3=": "6", "1+2=": "3", "2+2=": "4", "0+5=": "5", "3+4=": "7"}
# What each start trains: P (groups per generation batch), the longest completion, the learning rate.
STARTS = {"random": dict(prompts_per_step=4, max_completion_length=8, learning_rate=1e-2),
          "warmup": dict(prompts_per_step=16, max_completion_length=48, learning_rate=1e-4)}
WARMUP = ("demo", 22)                                 # the course demo's shipped warm-up (toy_tasks/warmups/)
SHOWN = (("pos_share_token", "share of weight on positives, token", ".3f"),
         ("pos_share_sequence", "share of weight on positives, sequence", ".3f"),
         ("pos_share_balanced", "share of weight on positives, balanced", ".3f"),
         ("token_loss_at_ratio_one", "token rule's loss at ratio 1", "+.4f"),
         ("len_pos", "mean length of positive responses", ".2f"),
         ("len_neg", "mean length of negative responses", ".2f"),
         ("n_groups", "groups", "d"),
         ("groups_without_signal", "groups without signal (tied or masked)", "d"))


def mentions_answer(completions, answer, **kwargs):   # TRL passes the dataset's other columns by name
    return [float(gold in completion) for completion, gold in zip(completions, answer)]


def verified(completions, answer, **kwargs):          # verifier.py's exact check of the final answer
    return [verify(completion, gold) for completion, gold in zip(completions, answer)]


def start(name):
    """(model, tokenizer, dataset, reward) of a start, the same weights every call."""
    if name == "warmup":
        path, sha256 = shipped_warmup(*WARMUP)
        model, tokenizer = load_warmup_file(path, sha256)   # refused in one line if the file changed
        train, _ = make_problems(seed=0)                    # the toy's training prompts, `ab+c+d=`
        return model.train(), tokenizer, train, verified
    tokenizer = char_tokenizer()                  # one token per character of the toy's digits
    model = tiny_qwen3(tokenizer, seed=0)         # ~130k parameters, random weights: the same start
    data = Dataset.from_dict({"prompt": list(PROMPTS), "answer": list(PROMPTS.values())})
    return model, tokenizer, data, mentions_answer


def train_rule(rule, steps, out, verbose=False, start_name="random"):
    """One run of `rule` from the same weights and TRL seed; -> (its rollouts file, TRL's log history)."""
    rollouts = os.path.join(out, f"rollouts-{rule}.jsonl")
    if os.path.exists(rollouts):
        os.remove(rollouts)                       # dump_rollouts appends: one run per file here
    model, tokenizer, data, reward = start(start_name)
    settings = STARTS[start_name]
    config = AggregationGRPOConfig(output_dir=os.path.join(out, f"run-{rule}"), aggregation_rule=rule,
                                   num_generations=GROUP, per_device_train_batch_size=settings["prompts_per_step"] * GROUP,
                                   max_completion_length=settings["max_completion_length"], max_steps=steps, seed=0,
                                   learning_rate=settings["learning_rate"],
                                   use_cpu=True, report_to="none", save_strategy="no", logging_steps=1,
                                   disable_tqdm=not verbose, log_level="info" if verbose else "error")
    trainer = AggregationGRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=data,
                                     reward_funcs=dump_rollouts(reward, rollouts, num_generations=GROUP))
    if not verbose:                               # TRL's per-step dicts: in the log history, not on screen
        from transformers import PrinterCallback, ProgressCallback
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
    trainer.train()
    return rollouts, [entry for entry in trainer.state.log_history if "loss" in entry]


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


def counted(number, noun):
    """'1 step', '3 steps': the printed lines read as English for --steps 1 too."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def story(summaries, first_loss, rewards, steps, step0, decision_lines):
    """What the runs measured and what to do with it, in words: each number is printed above or
    in the JSON line, what holds by construction is marked as an identity, what one run shows is
    labelled as one run, and the toy's evidence is quoted with its verdicts and its scope."""
    token = summaries["token"]
    lines = ["", f"What the three runs measured ({counted(steps, 'step')} each; diagnose's numbers on each run's own rollouts):",
             "- Step 0, the same batch in the three runs: wrong answers were "
             f"{fmt(step0['neg_over_pos'], '.2f')}x as long as right ones (Lbar- {fmt(step0['len_neg'], '.2f')}, "
             f"Lbar+ {fmt(step0['len_pos'], '.2f')}): "
             + ("the paper's situation, longer wrong answers." if (step0["neg_over_pos"] or 0) > 1 else
                "not the paper's situation (it has longer wrong answers): --start warmup reaches it."),
             "- Sign-length coupling (token aggregation's bias), one run: over the token run, wrong answers were "
             f"{fmt(token['neg_over_pos'], '.2f')}x as long as right ones, so token aggregation put "
             f"{fmt(token['pos_share_token'], '.1%')} of its gradient weight on right answers; sequence and balanced put "
             f"{fmt(token['pos_share_sequence'], '.1%')} and {fmt(token['pos_share_balanced'], '.1%')} "
             + ("(an identity with binary rewards, not a finding: each sign gets its advantage mass / G)."
                if token.get("shares_are_identities") else
                f"(measured: {token.get('n_length_zero', 0)} responses of length 0 or graded rewards make them "
                "no identity here)."),
             "- Its drift, as TRL logged it: the loss of the first step (ratio 1) was "
             + ", ".join(f"{rule} {first_loss[rule]:+.3g}" for rule in first_loss)
             + ". Token's is -sum_i A_i L_i / sum_i L_i per group, a measurement; sequence's and balanced's "
             "are 0 up to rounding (an identity: advantages sum to 0 in every group).",
             "- Sequence equal-weighting (sequence aggregation's bias), one run: lengths spread with std/mean "
             f"{fmt(token['std_over_mean'], '.2f')}; under sequence a token carries 1/L_i of its response's weight, "
             "so a short response's tokens outweigh a long one's of the same sign; under balanced every token of "
             "a sign weighs the same (an identity of its form, docs/method.md §4)."]
    if steps < SMOKE_TEST_BELOW:
        lines.append(f"- Which rule trains better: this was a smoke test, {counted(steps, 'step')} of one seed, so the mean "
                     "rewards (" + ", ".join(f"{rule} {rewards[rule]:.3f}" for rule in rewards)
                     + ") are not compared.")
    else:
        lines.append("- Which rule trains better: one run, one seed, " f"{counted(steps, 'step')}, no confidence interval "
                     "(mean rewards " + ", ".join(f"{rule} {rewards[rule]:.3f}" for rule in rewards)
                     + "): not a verdict either way.")
    lines += ["", "What to do with it: the verdicts come from the toy's registered designs, not from this run. "
              "diagnose's decision on the token run's rollouts (its step 0 placed against them):", *decision_lines]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Train token, sequence and balanced aggregation from one start "
                                                 "in TRL and print the three runs' bias side by side.")
    parser.add_argument("--steps", type=int, default=3,
                        help=f"optimizer steps per rule (under {SMOKE_TEST_BELOW}: a smoke test)")
    parser.add_argument("--out", default="three_rules", help="folder for the rollouts and TRL's run folders")
    parser.add_argument("--verbose", action="store_true", help="TRL's progress bars, per-step logs and warnings")
    parser.add_argument("--start", choices=tuple(STARTS), default="random",
                        help="random: a random tiny model, a lenient reward (wrong answers shorter); warmup: the "
                             "course demo's shipped warm-up, toy prompts, verifier.py (wrong answers longer)")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with warnings.catch_warnings():
        if not args.verbose:
            warnings.simplefilter("ignore")       # transformers' and TRL's deprecation notices
        runs = {rule: train_rule(rule, args.steps, args.out, args.verbose, args.start) for rule in RULES}
    files = {rule: path for rule, (path, _) in runs.items()}
    first_loss = {rule: history[0]["loss"] for rule, (_, history) in runs.items()}
    first_batches = {rule: [(row["length"], row["reward"]) for row in map(json.loads, open(path)) if row["step"] == 0]
                     for rule, path in files.items()}
    same_start = all(batch == first_batches[RULES[0]] for batch in first_batches.values())
    summaries = {rule: diagnose.diagnose(path) for rule, path in files.items()}   # each run's file as one batch
    rewards = {rule: mean_reward(path) for rule, path in files.items()}
    steps0 = diagnose.diagnose_steps(files["token"])
    decision, _ = diagnose.format_decision(diagnose.placement_batch(files["token"],
                                                                    diagnose.read_lines(files["token"])[0]))
    prompts_per_step = STARTS[args.start]["prompts_per_step"]
    print(f"The three runs' rollouts ({counted(args.steps, 'step')} each, P x G = {prompts_per_step} x {GROUP} per step, "
          f"start: {args.start}), read by python -m grpo_ba_lab.analysis.diagnose:")
    print(side_by_side(summaries, rewards))
    print(f"step 0's rollouts are the same in the three runs (same start and seed): {'yes' if same_start else 'no'}")
    for path in files.values():
        print(f"wrote {path}")
    print(story(summaries, first_loss, rewards, args.steps, steps0[0],
                decision.splitlines()[1:]))
    print(json.dumps({rule: {"mean_reward": rewards[rule], "trl_first_loss": first_loss[rule],
                             **{key: None if summaries[rule][key] != summaries[rule][key] else summaries[rule][key]
                                for key, _, _ in SHOWN}} for rule in RULES}))


if __name__ == "__main__":
    main()
