import os
import sys

# Tests never touch the network: every model and tokenizer is built or saved locally.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# A torch thread waiting for work sleeps instead of spinning (libgomp; read when torch is first
# imported, here and in every subprocess a test starts). The results are the same; what changes is
# the CPU a process with 2 threads takes from the other worker: one 2-thread step-0 check
# (test_designs.py) took 24.1 CPU seconds spinning and 6.2 passive, on a busy 2-core machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
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


# ------------------------------------------------------------------ parallel runs (pytest-xdist)
# The README's test command runs the suite on every core: `-n auto --dist loadgroup`. Each
# worker is one process with one core's share of threads (a test or a run may still set its
# own, as the toy's --threads does); the files in ONE_WORKER_FILES run whole on one worker.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")          # gw0, gw1, ...; None without -n
if XDIST_WORKER:
    os.environ["OMP_NUM_THREADS"] = "1"                        # read when torch is first imported
    from grpo_ba_support import run as _course_run
    # With the toy's default of 2 threads in each worker one run took 522 s, with 1 thread 489 s
    # (2-core AMD EPYC, one run each, a small fix between them; assets/suite-speed/). A test
    # that needs a thread count passes --threads.
    _course_run.TOY_THREADS = 1


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """One warm-up cache for the whole session, shared by every worker: test files that warm
    up the toy with the same settings share the policy instead of training it again
    (toy_tasks.model.load_or_warmup_toy locks an entry while one worker trains it)."""
    root = tmp_path_factory.getbasetemp()
    path = (root.parent if XDIST_WORKER else root) / "warmup_cache"   # parent: the run's, not the worker's
    path.mkdir(exist_ok=True)
    return str(path)


@pytest.fixture(autouse=True)
def torch_threads_restored():
    """A test that sets torch's threads (a run's --threads) leaves the next test on its worker
    the threads it found: no test depends on which tests ran before it."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch else None
    yield
    torch = sys.modules.get("torch")
    if torch is not None and before is not None and torch.get_num_threads() != before:
        torch.set_num_threads(before)


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
# `python -m pytest -q -m "not slow" -n auto`: the math core, the rules, the verifier, the
# command line and the study commands' parsing, in 33-39 s on a 2-core AMD EPYC
# (docs/install.md). A test is slow when it trains or builds a model (it asks for the warm-up
# cache, the tiny model or a whole demo), runs the notebook, another trainer, a fresh install
# or a `python -m` subprocess, or draws figures; the whole suite is what CI runs.
SLOW_FIXTURES = {"cache_dir", "tiny_model_dir", "random_policy", "single_run"}   # the last two: whole demos
SLOW_FILES = {"test_notebook.py", "test_trl_balanced.py", "test_trl_multiprocess.py", "test_verl_balanced.py",
              "test_install.py", "test_real_model.py", "test_rollout_engines.py", "test_gpu.py",
              "test_lora_and_eval.py", "test_verifier_fuzz.py", "test_exercises.py",
              "test_explore_page.py"}


# Files that hold nothing but slow tests: the quick tier does not even import them (trl,
# verl, a browser, the notebook's kernel); a full run checks that none holds a quick test.
ALL_SLOW_FILES = SLOW_FILES | {"test_page_numbers_mutations.py", "test_predict_then_run.py", "test_trl_example.py",
                               "test_trl_rules.py", "test_trl_three_rules_example.py", "test_verl_rules.py"}
# Files whose tests share an expensive module- or session-scoped set-up (trained runs, a
# browser, a built model, one interpreter running several command lines:
# tests/commands_in_one_process.py): under -n they run whole on one worker, so it is made once.
ONE_WORKER_FILES = {"test_run_safety.py", "test_trl_multiprocess.py", "test_run_outputs.py",
                    "test_rollout_engines.py", "test_real_model.py", "test_demo_seed_choice.py",
                    "test_run_figures.py", "test_explore_page.py", "test_bias_figures.py",
                    "test_token_mean_pooling.py", "test_cli_help.py", "test_dataset_refusals.py",
                    "test_training.py", "test_trl_three_rules_example.py", "test_plots.py"}
# The longest tests and units start first, so that the last to finish under -n is a short one:
# slowest first, as the idle durations of 20544c1 measured them, a ONE_WORKER_FILES file counted
# whole (test_explore_page.py's 58 tests about 85 s); then the other slow tests; under -n the
# quick tests (a second or less each) last, to fill the end on both workers.
LONGEST_FIRST = ("test_lab_plan.py::test_every_command_of_the_plan", "test_explore_page.py",
                 "test_demo.py::test_the_demo_from_the_shipped_warmup", "test_predict_then_run.py",
                 "test_rollout_engines.py", "test_real_model.py", "test_run_outputs.py", "test_packaging.py",
                 "test_training.py::test_sweep", "test_student_copy.py", "test_page_numbers_mutations.py",
                 "test_trl_multiprocess.py", "test_regime_map.py", "test_own_rule.py", "test_fresh_home.py",
                 "test_notebook.py", "test_designs.py", "test_trl_three_rules_example.py", "test_verl_rules.py",
                 "test_dataset_refusals.py", "test_training.py")


def pytest_ignore_collect(collection_path, config):
    if collection_path.name in ALL_SLOW_FILES and config.getoption("markexpr", "") == "not slow":
        return True
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(item.fixturenames) or item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
        elif item.path.name in ALL_SLOW_FILES and not item.get_closest_marker("slow"):
            raise pytest.UsageError(f"{item.nodeid} is quick, but tests/conftest.py's ALL_SLOW_FILES keeps "
                                    f"its file out of the quick tier: remove the file from that list")
        if item.path.name in ONE_WORKER_FILES:
            item.add_marker(pytest.mark.xdist_group(item.path.name))

    def rank(item):
        if XDIST_WORKER and not item.get_closest_marker("slow"):    # serially: a file's tests stay together
            return len(LONGEST_FIRST) + 1
        return next((i for i, part in enumerate(LONGEST_FIRST) if part in item.nodeid), len(LONGEST_FIRST))
    items.sort(key=rank)                       # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)           # optional: the suite runs without pytest-xdist too
def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup, as ONE_WORKER_FILES and LONGEST_FIRST mean it. pytest-xdist 3.8 groups
    tests by renaming their node ids, which pytest 9 ignores: the xdist_group marks above had
    no effect, and a file's tests were spread over both workers, each building its module's
    set-up again (the SmolLM2 run, the torchrun processes). Here a ONE_WORKER_FILES file is one
    unit of work, named by its file; every other test is a unit of its own. The units go out
    in the collection's order (LONGEST_FIRST), not xdist's default of the largest unit first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class OneWorkerFiles(LoadGroupScheduling):
        def _split_scope(self, nodeid):
            name = os.path.basename(nodeid.split("::", 1)[0])
            return name if name in ONE_WORKER_FILES else super()._split_scope(nodeid)

    config.option.loadscopereorder = False
    return OneWorkerFiles(config, log)


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
