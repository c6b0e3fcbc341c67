"""A run's policy leaves in Hugging Face format (grpo_ba_lab/plumbing/export.py): reloaded with
transformers (and PEFT under LoRA), it gives the trainer's log-probabilities."""
import dataclasses
import json
import os
import shlex
import shutil

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

import grpo_ba
from grpo_ba_lab import train as lab_train
from grpo_ba_lab import lab_args
from grpo_ba_lab.plumbing import export, lora
from toy_tasks import model as toy_model
from grpo_ba_support import task as grpo_ba_setup
from grpo_ba_support.run import SetupError

CARD = {"rule": "balanced", "steps": 3, "data": "toy", "heldout_accuracy": 0.625, "accuracy_step": 2,
        "command": "python grpo_ba.py --aggregator balanced --steps 3", "group_size": 4, "lr": 1e-4}


def batch(tokenizer, n_response=6):
    """Left-padded prompts with a response each, as rollout() builds them."""
    prompts = tokenizer(["1+2=", "33+4=", "5="], add_special_tokens=False, padding=True, return_tensors="pt")
    torch.manual_seed(1)
    response = torch.randint(4, len(tokenizer), (3, n_response))
    sequences = torch.cat([prompts["input_ids"], response], dim=1)
    attention = torch.cat([prompts["attention_mask"], torch.ones_like(response)], dim=1)
    return sequences, attention, n_response


def logprobs(model, tokenizer):
    with torch.no_grad():
        return grpo_ba.token_logprobs(model.eval(), *batch(tokenizer))[0]


def test_a_full_model_reloads_with_transformers_and_gives_the_same_logprobs(tmp_path):
    tokenizer = toy_model.char_tokenizer()
    policy = toy_model.tiny_qwen3(tokenizer, seed=3)
    out = export.save_policy(policy, tokenizer, str(tmp_path / "model"), CARD)
    assert os.path.isfile(os.path.join(out, "model.safetensors")) and not os.path.exists(out + ".tmp")
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    reloaded_tokenizer = AutoTokenizer.from_pretrained(out)
    assert reloaded_tokenizer("12+3=")["input_ids"] == tokenizer("12+3=")["input_ids"]
    assert reloaded_tokenizer.padding_side == "left"                  # the same batches as in training
    torch.testing.assert_close(logprobs(reloaded, reloaded_tokenizer), logprobs(policy, tokenizer), rtol=0, atol=0)
    other = toy_model.tiny_qwen3(tokenizer, seed=4)                 # the comparison can fail
    assert not torch.allclose(logprobs(other, tokenizer), logprobs(policy, tokenizer))


def test_the_model_card_says_what_trained_the_weights(tmp_path):
    tokenizer = toy_model.char_tokenizer()
    out = export.save_policy(toy_model.tiny_qwen3(tokenizer), tokenizer, str(tmp_path / "model"), CARD)
    text = open(os.path.join(out, "README.md")).read()
    front = yaml.safe_load(text.split("---")[1])
    assert front["library_name"] == "transformers" and "balanced-aggregation" in front["tags"]
    assert "base_model" not in front                                # no hub id to point to
    for shown in ("balanced aggregation", "| GRPO steps | 3 |", "| held-out accuracy | 0.625 |",
                  "`python -m grpo_ba --aggregator balanced --steps 3`", "| group_size | 4 |",
                  "arXiv 2605.04077"):
        assert shown in text, shown


def test_a_lora_policy_saves_its_adapter_which_peft_reloads_over_the_base(tmp_path, tiny_model_dir):
    peft = pytest.importorskip("peft", reason="LoRA is optional: pip install -r requirements/trl.txt")
    args = lab_args.parse_args(["--aggregator", "balanced", "--lora-rank", "4"])
    policy = lora.add_adapters(grpo_ba_setup.load_model(tiny_model_dir), args, "cpu")
    with torch.no_grad():                                           # trained adapters: B != 0
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    tokenizer = grpo_ba_setup.load_tokenizer(tiny_model_dir)
    out = export.save_policy(policy, tokenizer, str(tmp_path / "adapter"),
                             {**CARD, "base_model": "Qwen/Qwen3-1.7B"})
    files = set(os.listdir(out))
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md"} <= files
    assert "model.safetensors" not in files                         # megabytes, not the model
    assert json.load(open(os.path.join(out, "adapter_config.json")))["r"] == 4
    front = yaml.safe_load(open(os.path.join(out, "README.md")).read().split("---")[1])
    assert front["library_name"] == "peft" and front["base_model"] == "Qwen/Qwen3-1.7B"

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    base_logprobs = logprobs(base, tokenizer)
    reloaded = peft.PeftModel.from_pretrained(base, out)
    torch.testing.assert_close(logprobs(reloaded, tokenizer), logprobs(policy, tokenizer), rtol=0, atol=0)
    assert not torch.allclose(logprobs(reloaded, tokenizer), base_logprobs)      # the adapters matter


def test_an_export_replaces_an_earlier_export_but_never_another_directory(tmp_path):
    tokenizer = toy_model.char_tokenizer()
    out = str(tmp_path / "model")
    export.save_policy(toy_model.tiny_qwen3(tokenizer, seed=1), tokenizer, out, CARD)
    export.save_policy(toy_model.tiny_qwen3(tokenizer, seed=2), tokenizer, out, {**CARD, "steps": 5})  # a resumed run
    assert "| GRPO steps | 5 |" in open(os.path.join(out, "README.md")).read()
    assert sorted(os.listdir(tmp_path)) == ["model"]                 # no temporary directory left
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "todo.txt").write_text("keep me")
    with pytest.raises(SetupError, match="not an earlier model export"):
        export.save_policy(toy_model.tiny_qwen3(tokenizer), tokenizer, str(precious), CARD)
    assert (precious / "todo.txt").read_text() == "keep me"


def test_run_card_takes_the_last_heldout_accuracy_and_the_settings():
    args = dataclasses.asdict(lab_args.parse_args(["--aggregator", "token", "--steps", "3", "--group-size", "4"]))
    metrics = [{"step": 0, "accuracy": 0.5}, {"step": 1}, {"step": 2, "accuracy": 0.75}, {"step": 3, "accuracy": None}]
    card = export.run_card(args, metrics, command="python grpo_ba.py --aggregator token")
    assert card["rule"] == "token" and card["heldout_accuracy"] == 0.75 and card["accuracy_step"] == 2
    assert card["steps"] == 4 and card["group_size"] == 4 and "toy" in card["data"]
    assert card["command"] == "python grpo_ba.py --aggregator token"


def card_command(model_dir) -> list[str]:
    """The words of the card's command, from its table row."""
    card = open(os.path.join(model_dir, "README.md")).read().splitlines()
    row = next(line for line in card if line.startswith("| command |"))
    return shlex.split(row.split("`")[1])


def test_the_cards_command_reproduces_the_run_from_its_model_directory_after_a_copy(
        tmp_path, tiny_model_dir, monkeypatch):
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"{i}+1", "answer": str(i + 1)})
                              for i in range(8)))
    trained = tmp_path / "runs" / "first"
    assert lab_train.main(["--model", tiny_model_dir, "--dataset", str(data),
                         "--aggregator", "sequence",
                         "--group-size", "2", "--prompts-per-step", "2", "--max-new-tokens", "4",
                         "--threads", "1", "--steps", "1", "--lr", "3e-3", "--eval-prompts", "2",
                         "--output-dir", str(trained)]) == 0
    copied = tmp_path / "elsewhere" / "first"                 # another machine, another folder
    shutil.copytree(trained, copied)
    shutil.rmtree(trained)
    words = card_command(copied / "model")
    assert str(trained) not in " ".join(words)                # no path of the training machine
    assert words[:3] == ["python", "-m", "grpo_ba_lab.train"]  # no path to a clone either
    monkeypatch.chdir(copied / "model")                        # where the card says to run it
    again = lab_args.parse_args(words[3:] + ["--output-dir", "again"])
    saved = json.load(open(copied / "args.json"))
    assert json.loads(json.dumps(dataclasses.asdict(again))) == {**saved, "output_dir": "again"}
    assert again.aggregator == "sequence" and again.lr == 3e-3  # the run's, not the defaults


def test_portable_command_keeps_paths_outside_the_run_and_odd_quoting_as_they_are(tmp_path):
    model_dir = str(tmp_path / "run" / "model")
    command = f"python3 /src/grpo_ba.py --config={tmp_path}/run/args.json --model /models/qwen"
    assert export.portable_command(command, model_dir) == \
        "python3 -m grpo_ba --config=../args.json --model /models/qwen"
    unbalanced = 'python grpo_ba.py --dataset "a b'
    assert export.portable_command(unbalanced, model_dir) == unbalanced
