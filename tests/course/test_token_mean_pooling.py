"""docs/method.md §5's worked example, recomputed with the real functions: the per-group token
mean (this project's aggregate_token) and the batch-pooled token mean (verl's `token-mean`,
TRL's `dapo`: aggregate_token over the whole batch as one group) differ on a batch whose groups
differ in total length, and every number of the page's table is what the code gives."""
import os
import re

import pytest
import torch

from grpo_ba import aggregate_token, aggregation_coefficients, clipped_token_loss, group_advantages, mask_from_lengths

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
G, P = 4, 2
REWARDS = [1.0, 0, 1, 0, 1, 1, 0, 0]
LENGTHS = [2, 4, 1, 3, 6, 6, 10, 10]


@pytest.fixture(scope="module")
def section_5():
    with open(os.path.join(ROOT, "docs", "method.md")) as f:
        text = f.read()
    return text[text.index("## §5"):text.index("## §6")]


def table_row(section, label):
    """The cells of the table row whose first cell starts with `label`."""
    row = next(line for line in section.splitlines() if line.startswith(f"| {label}"))
    return [cell.strip() for cell in row.strip("|").split("|")]


def batch():
    mask = mask_from_lengths(torch.tensor(LENGTHS))
    adv = group_advantages(torch.tensor(REWARDS), G)
    logp = torch.zeros(mask.shape)
    return clipped_token_loss(logp, logp, adv, mask), mask, adv


def test_per_group_and_pooled_token_means_are_the_pages_numbers(section_5):
    loss, mask, adv = batch()
    groups = [aggregate_token(loss[i:i + G], mask[i:i + G], adv[i:i + G], G).item() for i in (0, G)]
    per_group, pooled = aggregate_token(loss, mask, adv, G).item(), aggregate_token(loss, mask, adv, P * G).item()
    assert per_group == pytest.approx(sum(groups) / P) and abs(per_group - pooled) > 0.03
    cells = table_row(section_5, "per group")
    assert cells[1] == f"({groups[0]:.3f} + {groups[1]:.3f}) / 2 = {per_group:.3f}"
    assert table_row(section_5, "pooled")[1].endswith(f"= {pooled:.3f}")
    assert f"# per group: {per_group:.3f}" in section_5 and f"# pooled over the batch: {pooled:.3f}" in section_5


def test_the_token_weights_and_group_2s_share_are_the_pages_numbers(section_5):
    _, mask, adv = batch()
    for label, size in (("per group", G), ("pooled", P * G)):
        c = aggregation_coefficients(mask, adv, size, "token")                      # (B, T)
        first, second = c[0, 0].item(), c[G, 0].item()
        weights = re.findall(r"= (\d\.\d{3})", table_row(section_5, label)[2])
        assert weights == [f"{first:.3f}", f"{second:.3f}"], label
        share = c[G:].sum().item() / c.sum().item()
        assert table_row(section_5, label)[3] == f"{share:.2f}", label
