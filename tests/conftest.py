import os
import sys

# Tests never touch the network: every model and tokenizer is built or saved locally.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import importlib.util

import pytest

# An interpreter without the project's packages gets one line saying what to install,
# instead of an ImportError per test file.
_MISSING = [name for name in ("torch", "transformers", "datasets", "sympy", "matplotlib")
            if importlib.util.find_spec(name) is None]
if _MISSING:
    pytest.exit(f"{sys.executable} lacks {', '.join(_MISSING)}: install the packages first with the README's test "
                f"command (pip install -r requirements.txt -r requirements/dev.txt ... -c requirements/lock.txt)",
                returncode=4)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """One warm-up cache for the whole session: test files that warm up the toy with the
    same settings share the policy instead of training it again."""
    return str(tmp_path_factory.mktemp("warmup_cache"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny Qwen3 and a tokenizer with a chat template, saved like a hub checkpoint."""
    from toy_tasks.model import char_tokenizer, tiny_qwen3
    path = tmp_path_factory.mktemp("tiny_qwen3")
    tokenizer = char_tokenizer(
        "0123456789+-*/=~?. abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\\{}()[]:,\n<|>_")
    tokenizer.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    model = tiny_qwen3(tokenizer)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def verl_base_config():
    """verl's full default trainer config, which the verl tests start from (they skip
    without verl)."""
    verl = pytest.importorskip("verl")
    from omegaconf import OmegaConf
    return OmegaConf.load(os.path.join(os.path.dirname(verl.__file__), "trainer", "config",
                                       "_generated_ppo_trainer.yaml"))


def verl_actor_config(base, prompts: int, mode: str, group_size: int, eps_low: float, eps_high: float):
    """A copy of verl's config for `prompts` groups of `group_size` in one mini-batch, one row per
    micro-batch, with this loss mode and clip range: (config, its actor node)."""
    import copy
    cfg = copy.deepcopy(base)
    cfg.data.train_batch_size = prompts
    cfg.actor_rollout_ref.rollout.n = group_size
    actor = cfg.actor_rollout_ref.actor
    actor.ppo_mini_batch_size = prompts
    actor.ppo_micro_batch_size_per_gpu = 1
    actor.loss_agg_mode = mode
    actor.clip_ratio_low, actor.clip_ratio_high = eps_low, eps_high
    return cfg, actor


# ------------------------------------------------------------------ the quick tier
# `python -m pytest -q -m "not slow"`: the math core, the rules, the verifier, the command
# line and the study commands' parsing, in about two minutes on a 2-core CPU. A test is
# slow when it trains or builds a model (it asks for the warm-up cache or the tiny model),
# runs the notebook, another trainer, a fresh install or a `python -m` subprocess; the whole
# suite is what CI runs.
SLOW_FIXTURES = {"cache_dir", "tiny_model_dir"}
SLOW_FILES = {"test_notebook.py", "test_trl_balanced.py", "test_trl_multiprocess.py", "test_verl_balanced.py",
              "test_install.py", "test_real_model.py", "test_rollout_engines.py", "test_gpu.py",
              "test_lora_and_eval.py", "test_verifier_fuzz.py", "test_exercises.py",
              "test_explore_page.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(item.fixturenames) or item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)


# torch's own bf16 attention (pack_vnni2) and inductor's C++ code generation follow the CPU's
# features, not a forced ATEN_CPU_CAPABILITY: forcing avx2 or default on an AVX-512 CPU
# (how these tests emulate another machine) breaks them inside torch. A real AVX2 CPU takes
# other kernels there, so these few tests run only on the CPU's own kernels.
forced_kernels = pytest.mark.skipif(
    os.environ.get("ATEN_CPU_CAPABILITY", "") not in ("", "avx512", "AVX512"),
    reason="torch's bf16 attention and inductor assume the CPU's own kernels; ATEN_CPU_CAPABILITY forces others")


# ------------------------------------------------------------------ the browser tests
# tests/course/test_explore_page.py skips without Chromium; one line says so, even under -q.
def pytest_terminal_summary(terminalreporter):
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if "test_explore_page.py" in report.nodeid]
    if skipped:
        reason = skipped[0].longrepr[2] if isinstance(skipped[0].longrepr, tuple) else str(skipped[0].longrepr)
        terminalreporter.write_line(f"{len(skipped)} browser tests skipped, {reason.removeprefix('Skipped: ')}")
