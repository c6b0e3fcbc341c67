"""Every snippet a TRL or verl user reads is checked, so none can go stale (issue 67).

The pages: docs/trl.md, docs/verl.md, docs/trainer-names.md, docs/diagnose.md, docs/lab.md, and
the docstrings of grpo_ba_lab/integrations/*.py. A snippet is an indented or fenced block. Each
one is listed in CHECKS with how it is checked:

- python: executed as written, on a tiny model saved in a temporary folder (nothing downloaded).
  The names a snippet leaves to the reader (`model`, `my_reward`, `dataset`, `config`) are bound
  to tiny objects first. Nothing about the machine is faked: TRL's default config asks for bf16 on a
  GPU, so the snippets that build a config ask the machine (is_torch_bf16_gpu_available), and the
  `config` the reader brings is one their machine accepts (bf16 only where it is supported).
- shell: executed with bash in a temporary folder, the clone on PYTHONPATH; its output is compared
  with the page where the page shows it.
- parsed: each command line is parsed by its own program's parser, not run (the reason is given:
  it trains for minutes to hours, or needs a GPU and a downloaded model).
- not run: with the reason, and what is checked instead (the files and names it mentions).
- formula / output: not code; an output block is compared where its command is run.

A snippet that is not in CHECKS fails test_every_snippet_of_the_pages_is_checked, and a CHECKS
entry whose snippet is gone fails it too: a new or changed snippet must be classified here.
"""
import ast
import importlib.util
import json
import os
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = ("docs/trl.md", "docs/verl.md", "docs/trainer-names.md", "docs/diagnose.md", "docs/lab.md")
MODULES = ("grpo_ba_lab/integrations/__init__.py", "grpo_ba_lab/integrations/bias_metrics.py",
           "grpo_ba_lab/integrations/trl_balanced.py", "grpo_ba_lab/integrations/verl_balanced.py")
HAS_TRL = importlib.util.find_spec("trl") is not None
HAS_VERL = importlib.util.find_spec("verl") is not None


def blocks(text):
    """[(line number, text)] of the indented (4 spaces after a blank line) and fenced blocks."""
    lines, out, at = text.split("\n"), [], 0
    while at < len(lines):
        line = lines[at]
        if line.startswith("```"):
            end = next(j for j in range(at + 1, len(lines)) if lines[j].startswith("```"))
            out.append((at + 1, "\n".join(lines[at + 1:end])))
            at = end + 1
            continue
        if line.startswith("    ") and (at == 0 or not lines[at - 1].strip()):
            end = at
            while end < len(lines) and (lines[end].startswith("    ") or (
                    not lines[end].strip() and end + 1 < len(lines) and lines[end + 1].startswith("    "))):
                end += 1
            out.append((at + 1, "\n".join(row[4:] for row in lines[at:end])))
            at = end
            continue
        at += 1
    return out


def snippets():
    """{(source, first line): text} of every page and module docstring."""
    found = {}
    for source in PAGES + MODULES:
        with open(os.path.join(ROOT, source), encoding="utf-8") as f:
            text = f.read()
        if source.endswith(".py"):
            text = ast.get_docstring(ast.parse(text)) or ""
        for _, block in blocks(text):
            found[(source, block.split("\n")[0].strip())] = block
    return found


TRL_BUILD = "from grpo_ba_lab.integrations.trl_balanced import AggregationGRPOConfig, AggregationGRPOTrainer"
VERL_MAIN = "pip install /path/to/grpo-ba"
CHECKS = {
    ("docs/trl.md", TRL_BUILD): "python",
    ("docs/trl.md", "python -m grpo_ba_lab.examples.trl_three_rules       # from the clone's top folder; "
                    "--steps, --out, --verbose"): "run elsewhere: tests/lab/test_trl_three_rules_example.py",
    ("docs/trl.md", "python -m grpo_ba_lab.examples.trl_three_rules --start warmup   # long wrong answers at step 0"):
        "run elsewhere: tests/lab/test_trl_three_rules_example.py",
    ("docs/trl.md", "one GRPO step: P=8 x G=8, up to 32 new tokens, mu=1, tiny Qwen3 (132,672 parameters), "
                    "2 threads, median of 9 steps after one warm-up step"): "output: a timing on one machine",
    ("docs/verl.md", "pip install -r requirements.txt -r requirements/verl.txt"): "not run: pip install",
    ("docs/verl.md", "pip install /path/to/grpo-ba            # into the environment verl runs in (every node "
                     "of the Ray cluster)"): "not run: verl main_ppo",
    ("docs/verl.md", "sum_it l_it(A_i * c_i * N) / N  =  sum_it c_i * l_it(A_i)  =  J_BA,"): "formula",
    ("docs/verl.md", "token-mean:          (N / N_k) * sum over its rows of c_i * grad sum_t l_it(A_i)"): "formula",
    ("docs/verl.md", "python -m pytest tests/lab/test_verl_balanced.py -q"): "not run: the page's own tests",
    ("docs/verl.md", "grpo_ba_lab.integrations.verl_balanced refused the config: algorithm.adv_estimator=grpo_balanced "
                     "needs actor_rollout_ref.actor.loss_agg_mode=token-mean (verl's default) or seq-mean-token-sum, "
                     "got 'token-sum': ..."):
        "output: of verl's main_ppo, run by test_verls_entry_point_stops_a_refused_config_with_its_one_line_reason_and_"
        "no_traceback (tests/lab/test_verl_balanced.py)",
    ("docs/diagnose.md", "python -m grpo_ba_lab.analysis.diagnose rollouts.jsonl      # --adv-scale none for "
                         "Dr. GRPO advantages"): "shell",
    ("docs/diagnose.md", "cat > rollouts.jsonl <<'EOF'"): "shell",
    ("docs/diagnose.md", "rollouts.jsonl: 8 responses in 2 groups of 4 (advantages: std scaling, population std "
                         "+ 1e-06; the whole file as one batch)"): "output: of cat > rollouts.jsonl",
    ("docs/diagnose.md", "python - <<'EOF'"): "shell",
    ("docs/diagnose.md", "95% intervals over its 32 groups with a signal (bootstrap, 2000 resamples of its groups in "
                         "the loss, tied ones too, seed 0; nominal: from 12 groups they covered at least 0.85 in simulation): wrong/right [2.08, 2.62], token's share [0.278, 0.326]"): "output: of python - <<'EOF'",
    ("docs/diagnose.md", "diagnose's bootstrap interval (95%, 2000 resamples) against the number of groups with a "
                         "signal; 400 simulated runs per cell, seed 20261207"):
        "output: of python -m grpo_ba_lab.analysis.diagnose_min_groups, compared with its committed "
        "assets/diagnose-min-groups/table.txt by tests/lab/test_diagnose.py",
    ("docs/diagnose.md", "python -m grpo_ba_lab.analysis.diagnose completions.jsonl --figure bias.png   "
                         "# --adv-scale none: Dr. GRPO"): "shell",
    ("docs/diagnose.md", "python -m grpo_ba_lab.analysis.diagnose rollouts.jsonl"): "shell",
    ("docs/diagnose.md", "from grpo_ba_lab.integrations.trl_balanced import GRPOTrainerWithBiasMetrics, "
                         "dump_rollouts"): "python",
    ("docs/diagnose.md", VERL_MAIN + "            # a verl.plugins entry point: import verl loads it"):
        "not run: verl main_ppo",
    ("docs/lab.md", "python -m grpo_ba_lab.train --aggregator balanced --regime variance --steps 200   "
                    "# a world no design names"): "parsed",
    ("docs/lab.md", "python grpo_ba.py --preset qwen3-1.7b --aggregator balanced --dataset data.jsonl"): "parsed",
    ("docs/lab.md", "python -m grpo_ba_lab.train --preset qwen3-1.7b --aggregator balanced \\"): "parsed",
    ("grpo_ba_lab/integrations/trl_balanced.py", TRL_BUILD): "python",
    ("grpo_ba_lab/integrations/trl_balanced.py", '"token"     J_tok = mean_p (1 / sum_i L_i) sum_i sum_t l_it    '
                                                 "DAPO's paper's token mean, per group"): "formula",
    ("grpo_ba_lab/integrations/trl_balanced.py", "loss = sum_it l_it(A'_i) / N,      N = completion tokens of the "
                                                 "whole generation batch"): "formula",
    ("grpo_ba_lab/integrations/trl_balanced.py", "pos_share_token, pos_share_sequence, pos_share_balanced   share "
                                                 "of each rule's gradient weight at"): "formula",
    ("grpo_ba_lab/integrations/trl_balanced.py", "gradient of one optimizer step = (spg / GA) * sum over the rows "
                                                 "of its GA slices of c_i * grad sum_t l_it(A_i)"): "formula",
    ("grpo_ba_lab/integrations/verl_balanced.py", VERL_MAIN + "                   # a verl.plugins entry point "
                                                  "(pyproject.toml)"): "not run: verl main_ppo",
    ("grpo_ba_lab/integrations/verl_balanced.py", "grpo_token      J_tok = mean_p (1 / sum_i L_i) sum_i sum_t l_it"
                                                  "     DAPO's paper's token mean, per group"): "formula",
    ("grpo_ba_lab/integrations/verl_balanced.py", "token-mean (verl's default)  verl: loss = sum_it l_it / N_mb,  "
                                                  "N_mb = response tokens of the mini-batch"): "formula",
    ("grpo_ba_lab/integrations/verl_balanced.py", "algorithm.adv_estimator                        grpo_token, "
                                                  "grpo_sequence, grpo_balanced or"): "formula",
    ("grpo_ba_lab/integrations/verl_balanced.py", "token-mean:          (N / N_k) * sum over its rows of c_i * "
                                                  "grad sum_t l_it(A_i)"): "formula",
    ("grpo_ba_lab/integrations/verl_balanced.py", "pos_share_token, pos_share_sequence, pos_share_balanced   share "
                                                  "of each rule's gradient weight at"): "formula",
}


def test_every_snippet_of_the_pages_is_checked():
    found = snippets()
    assert sorted(set(found) - set(CHECKS)) == [], "unclassified snippets: add each to CHECKS"
    assert sorted(set(CHECKS) - set(found)) == [], "CHECKS names snippets the pages no longer have"
    for key, how in CHECKS.items():
        if how == "python":
            compile(found[key], str(key), "exec")               # Python, whatever else is checked


# =====================================================================================
# python: run as written
# =====================================================================================


@pytest.fixture
def trl_names(tiny_model_dir, tmp_path, monkeypatch):
    """The names the snippets leave to the reader, bound to tiny objects; the folder to run in."""
    if not HAS_TRL:
        pytest.skip("TRL is optional: pip install -r requirements/trl.txt")
    from datasets import Dataset
    from transformers.utils import is_torch_bf16_gpu_available
    from trl import GRPOConfig
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def my_reward(completions, **kwargs):
        return [float(len(completion) % 2) for completion in completions]
    return {"model": tiny_model_dir, "my_reward": my_reward,
            "dataset": Dataset.from_dict({"prompt": ["1+1=", "2+3="]}),
            "config": GRPOConfig(output_dir="run", num_generations=8, per_device_train_batch_size=8, report_to=[],
                                 bf16=is_torch_bf16_gpu_available())}


@pytest.mark.slow                                 # builds TRL's trainer on a tiny model
@pytest.mark.parametrize("key", [key for key, how in CHECKS.items() if how == "python"], ids=lambda k: k[0])
def test_each_python_snippet_runs_as_written(trl_names, key):
    import transformers.training_args as training_args
    from transformers.utils import is_torch_bf16_gpu_available
    assert training_args.is_torch_bf16_gpu_available is is_torch_bf16_gpu_available   # the machine's own answer
    namespace = dict(trl_names)
    exec(compile(snippets()[key], str(key), "exec"), namespace)
    trainer = namespace["trainer"]
    if TRL_BUILD in key[1]:
        assert type(trainer).__name__ == "AggregationGRPOTrainer" and trainer.args.aggregation_rule == "token"
        assert trainer.rule == "token"
    else:
        assert type(trainer).__name__ == "GRPOTrainerWithBiasMetrics"
        (writer,) = [f for f in trainer.reward_funcs if getattr(f, "dumps_rollouts", False)]
        assert writer.trainer is trainer                          # attached: it will write the loss's lengths


# =====================================================================================
# shell: run, output compared with the page
# =====================================================================================


def bash(script, cwd, check=True):
    env = {**os.environ, "PYTHONPATH": ROOT, "PATH": os.path.dirname(sys.executable) + os.pathsep
           + os.environ.get("PATH", ""), "MPLBACKEND": "Agg"}
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, done.stderr[-2000:]
    return done


def page_block(source, first):
    return snippets()[(source, first)]


@pytest.mark.slow                                 # python -m subprocesses
def test_the_diagnose_pages_example_prints_what_the_page_shows(tmp_path):
    script = page_block("docs/diagnose.md", "cat > rollouts.jsonl <<'EOF'")
    printed = bash(script, tmp_path).stdout
    shown = [key for key in CHECKS if key[0] == "docs/diagnose.md" and key[1].startswith("rollouts.jsonl: 8")][0]
    assert printed.rstrip("\n").split("\n") == [line.rstrip() for line in page_block(*shown).split("\n")]
    first = "python -m grpo_ba_lab.analysis.diagnose rollouts.jsonl      # --adv-scale none for Dr. GRPO advantages"
    assert bash(page_block("docs/diagnose.md", first), tmp_path).stdout == printed   # the same file, the same report


@pytest.mark.slow                                 # python -m subprocesses
def test_the_diagnose_pages_32_group_example_prints_its_interval_and_recommendation(tmp_path):
    printed = bash(page_block("docs/diagnose.md", "python - <<'EOF'"), tmp_path).stdout
    shown = [key for key in CHECKS if key[0] == "docs/diagnose.md" and key[1].startswith("95% intervals over its 32")][0]
    assert printed.rstrip("\n").split("\n") == page_block(*shown).split("\n")
    assert printed.split("\n")[1].startswith("recommendation: try balanced")


@pytest.mark.slow
def test_the_step_by_step_command_draws_its_figure(tmp_path):
    lines = [{"prompt": "1+1=", "completion": "2", "group": f"{step}-{g}", "step": step, "reward": r, "length": n}
             for step in (0, 1) for g in range(2) for r, n in ((1, 3 + step), (0, 9), (1, 4), (0, 7 + g))]
    (tmp_path / "completions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    command = page_block("docs/diagnose.md", "python -m grpo_ba_lab.analysis.diagnose completions.jsonl --figure "
                                             "bias.png   # --adv-scale none: Dr. GRPO")
    printed = bash(command, tmp_path).stdout
    assert "step by step" in printed and (tmp_path / "bias.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_the_several_runs_example_prints_the_pages_error_and_reads_one_run(tmp_path):
    block = page_block("docs/diagnose.md", "python -m grpo_ba_lab.analysis.diagnose rollouts.jsonl").split("\n")
    first_command, error, second_command = block
    import re
    runs = re.findall(r"run (\S+) \(16 responses", error)
    assert len(runs) == 2
    (tmp_path / "rollouts.jsonl").write_text("".join(
        json.dumps({"group": f"0-{i // 4}", "reward": i % 2, "length": 3 + i, "run": run}) + "\n"
        for run in runs for i in range(16)))
    refused = bash(first_command, tmp_path, check=False)
    assert refused.returncode == 2 and refused.stderr.strip() == error
    assert bash(second_command, tmp_path).stdout.strip().splitlines()[-1].startswith("{")


# =====================================================================================
# parsed: the command lines a CPU test cannot run
# =====================================================================================


def command_lines(block):
    """The block's command lines, continuations joined, comments dropped."""
    text = block.replace("\\\n", " ")
    return [line.split("#")[0].strip() for line in text.split("\n") if line.split("#")[0].strip()]


def parse(words):
    """Parse one command line with its own program's parser; -> what was checked."""
    from grpo_ba_lab import lab_args
    if words[:3] == ["python", "-m", "grpo_ba_lab.train"]:
        lab_args.parse_args(words[3:])
        return "parsed by grpo_ba_lab.train"
    if words[:3] == ["python", "-m", "grpo_ba_lab.analysis.sweep"]:
        from grpo_ba_lab.analysis.sweep import SweepOptions
        args, options = lab_args.parse_command(words[3:], SweepOptions)
        from grpo_ba_lab import designs
        assert args.design in designs.DESIGNS
        return "parsed by grpo_ba_lab.analysis.sweep"
    if words[:3] == ["python", "-m", "grpo_ba_lab.analysis.report"]:
        from grpo_ba_lab.analysis import report
        with pytest.raises(SystemExit) as shown:                 # its parser: --help exits 0
            report.main(["--help"])
        assert shown.value.code == 0 and len(words) == 4
        return "report's parser takes one RUNS_DIR"
    if words[:3] == ["python", "-m", "grpo_ba_lab.analysis.diagnose"]:     # quick: run it on docs/diagnose.md's file
        import contextlib
        import io
        import tempfile
        from grpo_ba_lab.analysis import diagnose
        example = snippets()[("docs/diagnose.md", "cat > rollouts.jsonl <<'EOF'")].split("\n")[1:9]
        with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
            path = os.path.join(folder, words[3])
            with open(path, "w") as f:
                f.write("\n".join(example) + "\n")
            assert diagnose.main([path, *words[4:]]) == 0
        return "run by grpo_ba_lab.analysis.diagnose on docs/diagnose.md's example file"
    if words[:2] == ["python", "grpo_ba.py"]:
        import grpo_ba
        grpo_ba.parse_args(words[2:])
        return "parsed by grpo_ba.py"
    raise AssertionError(f"no parser for {words}")


@pytest.mark.parametrize("key", [key for key, how in CHECKS.items() if how == "parsed"], ids=lambda k: k[0])
def test_each_command_line_that_trains_for_long_is_accepted_by_its_parser(key):
    """They train for minutes (the toy) to hours, or need a GPU and a downloaded model: parsed, not run.
    A line with `...` elides flags and is skipped."""
    checked = [parse(shlex.split(line)) for line in command_lines(snippets()[key]) if "..." not in line]
    assert checked


# =====================================================================================
# not run: what is checked instead
# =====================================================================================


def test_the_install_lines_name_files_that_exist_and_the_verl_version_installed():
    block = snippets()[("docs/verl.md", "pip install -r requirements.txt -r requirements/verl.txt")]
    for word in block.split():
        if word.startswith("requirements"):
            assert os.path.exists(os.path.join(ROOT, word)), word
    if HAS_VERL:
        from importlib.metadata import version
        assert f"verl=={version('verl')}" in block


@pytest.mark.skipif(not HAS_VERL, reason="verl is optional: pip install -r requirements/verl.txt")
@pytest.mark.parametrize("key", [key for key, how in CHECKS.items() if how == "not run: verl main_ppo"],
                         ids=lambda k: k[0])
def test_each_verl_launch_names_estimators_its_start_check_accepts(verl_base_config, key):
    """main_ppo starts Ray and a model: not run. Every adv_estimator the snippet names is one the
    plugin registers and validate_config (the check main_ppo runs before Ray) accepts, with verl's
    default config; the package it installs declares the verl.plugins entry point."""
    import copy
    import re
    import verl.trainer.main_ppo as main_ppo
    import grpo_ba_lab.integrations.verl_balanced as vb
    block = snippets()[key]
    names = set(re.findall(r"adv_estimator=(\w+)", block)) | set(re.findall(r"\b(grpo_(?:token|sequence))\b", block))
    assert names and names <= set(vb.accepted_estimators()[:4])
    for name in names:
        cfg = copy.deepcopy(verl_base_config)
        cfg.algorithm.adv_estimator = name
        cfg.actor_rollout_ref.actor.ppo_mini_batch_size = cfg.data.train_batch_size
        vb.validate_trainer_config(cfg)
        assert getattr(main_ppo.validate_config, "checks_grpo_ba", False)
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        assert '[project.entry-points."verl.plugins"]' in f.read()


def test_the_pages_own_test_command_names_a_test_file():
    block = snippets()[("docs/verl.md", "python -m pytest tests/lab/test_verl_balanced.py -q")]
    assert os.path.exists(os.path.join(ROOT, block.split()[3]))


def test_the_example_commands_are_run_by_the_examples_test():
    with open(os.path.join(ROOT, "tests", "lab", "test_trl_three_rules_example.py")) as f:
        test = f.read()
    for key, how in CHECKS.items():
        if how == "run elsewhere: tests/lab/test_trl_three_rules_example.py":
            words = command_lines(snippets()[key])[0].split()
            assert words[2] in test and all(f'"{flag}"' in test for flag in words[3:] if flag.startswith("--"))


# =====================================================================================
# Inline API calls: `AggregationGRPOConfig(aggregation_rule="token")` in a sentence or a table cell
# =====================================================================================

API = ("AggregationGRPOConfig", "AggregationGRPOTrainer", "BalancedGRPOTrainer", "GRPOTrainerWithBiasMetrics",
       "dump_rollouts")


def inline_calls():
    """[(source, call)] of the code spans (backticked, in pages and docstrings) that call the TRL plug-in's API."""
    import re
    found = []
    for source in PAGES + MODULES:
        with open(os.path.join(ROOT, source), encoding="utf-8") as f:
            text = f.read()
        for span in re.findall(r"`([^`\n]+)`", text):
            if span.startswith(API) and "(" in span:
                found.append((source, span))
    return found


def expansions(call):
    """A call with `...` for the rule, or alternatives `"a" | "b"`, as one call per rule."""
    from grpo_ba_lab.integrations.trl_balanced import RULES
    if 'aggregation_rule="token" | "sequence" | "balanced"' in call:
        return [call.replace('"token" | "sequence" | "balanced"', f'"{rule}"') for rule in RULES]
    if "aggregation_rule=..." in call:
        return [call.replace("aggregation_rule=...", f'aggregation_rule="{rule}"') for rule in RULES]
    return [call]


@pytest.mark.skipif(not HAS_TRL, reason="TRL is optional: pip install -r requirements/trl.txt")
def test_every_inline_call_of_the_trl_plugin_is_one_it_accepts(tmp_path, monkeypatch):
    """Issue 67 found `AggregationGRPOTrainer(rule="token")` on three pages, which the trainer refuses
    with a TypeError. Every backticked call of the plug-in's API on the pages and in the docstrings
    is evaluated here (configs built; a trainer call would need a model, so none may be written
    with arguments other than the config's)."""
    import torch
    import transformers.training_args as training_args
    import grpo_ba_lab.integrations.trl_balanced as trl_balanced
    if not torch.cuda.is_available():
        monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.chdir(tmp_path)
    calls = inline_calls()
    assert len(calls) >= 5
    for source, call in calls:
        assert call.startswith("AggregationGRPOConfig("), (source, call)     # the only form the pages use
        for one in expansions(call):
            config = eval(one, {name: getattr(trl_balanced, name) for name in API})
            assert config.aggregation_rule in trl_balanced.RULES, (source, one)


def test_no_page_or_docstring_passes_rule_to_a_trainer():
    import re
    stale = re.compile(r"(AggregationGRPOTrainer|BalancedGRPOTrainer)\([^)]*(?<![a-z_])rule=")
    for source in PAGES + MODULES:
        with open(os.path.join(ROOT, source), encoding="utf-8") as f:
            assert not stale.search(f.read()), source
    assert stale.search('AggregationGRPOTrainer(rule="token", model=m)')      # the pattern the issue found
