"""grpo_ba_lab/plumbing/chat_template.py -- what a real model's tokenizer says about turns: the prompt
text through its chat template, and every token id that ends a response.

Below lm_setup and real_data (both format prompts); imports nothing of the project.
"""
from __future__ import annotations

import weakref

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def format_prompt(tokenizer, prompt) -> str:
    """The text the policy continues: the chat template (asking for \\boxed{}) when the
    tokenizer has one, else the prompt as it is."""
    if getattr(tokenizer, "chat_template", None):
        messages = prompt if isinstance(prompt, list) else [
            {"role": "user", "content": f"{prompt}\n{BOXED_INSTRUCTION}"}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if isinstance(prompt, list):
        return "\n".join(m["content"] for m in prompt)
    return str(prompt)


def stop_token_ids(tokenizer, generation_config=None) -> list[int]:
    """Every id that ends a response, the tokenizer's EOS first: the model's generation
    config EOS ids (Qwen3 lists two) and the token the chat template closes a turn with
    (ChatML's <|im_end|>, Llama 3's <|eot_id|>), so that a base model prompted through a
    chat template (Qwen2.5-Math-7B, whose EOS is <|endoftext|>) stops at its turn's end."""
    ids = [tokenizer.eos_token_id]
    configured = getattr(generation_config, "eos_token_id", None)
    ids += configured if isinstance(configured, (list, tuple)) else [configured]
    ids += end_of_turn_ids(tokenizer)
    return list(dict.fromkeys(i for i in ids if i is not None))


_END_OF_TURN = weakref.WeakKeyDictionary()    # tokenizer -> (its template, end-of-turn ids): not rendered per rollout


def end_of_turn_ids(tokenizer) -> list[int]:
    """[id] of the special token right after an assistant message in the chat template,
    found by rendering one exchange (once per tokenizer and template); [] without a
    template or special token there."""
    template = getattr(tokenizer, "chat_template", None)
    cached = _END_OF_TURN.get(tokenizer)
    if cached is None or cached[0] != template:
        cached = _END_OF_TURN[tokenizer] = (template, _render_end_of_turn_ids(tokenizer))
    return cached[1]


def _render_end_of_turn_ids(tokenizer) -> list[int]:
    if not getattr(tokenizer, "chat_template", None):
        return []
    marker = "END_OF_TURN_PROBE"
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "q"}, {"role": "assistant", "content": marker}],
                                             tokenize=False)
    except Exception:                         # a template that refuses this exchange: no extra stop id
        return []
    if marker not in text:
        return []
    first = tokenizer.encode(text.split(marker, 1)[1], add_special_tokens=False)[:1]
    special = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    return [i for i in first if i in special]
