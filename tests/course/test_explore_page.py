"""docs/explore.html in a real browser: its numbers are grpo_ba.py's, its drawing is the formulas',
each preset shows what its name says, its words name both biases, every control works from the
keyboard alone, and the page fits a projector, a small projector and a phone.

Chromium (Debian's chromium and chromium-driver) is driven by selenium (requirements/dev.txt), one
browser for the whole module. Without them every test here skips with one line naming
`apt-get install chromium chromium-driver` (tests/conftest.py prints it even under -q). Groups are
set through the page's own controls, as a drag or a click sets them (a slider gets its value and an
input event, a radio or button a click), never by calling the page's functions.

Two kinds of check. Numbers: read from the data-value attribute of what the page displays (the
displayed text must be that number rounded) and compared with grpo_ba.py's functions. Drawing: the
geometry of what is drawn (SVG attributes, bounding boxes) is read back, each axis's scale is
recovered from its drawn ticks and their labels, and every bar, share fill, strip cell, curve point
and marker must sit where the formulas of docs/method.md §3, computed here in float64 and
independently of the page, put it. test_drawing_checker_catches_each_broken_picture breaks the page
in each way a wrong picture can (half-height bars, a fill of 1 - share, a marker at 1/ratio, a curve
of 1/(1+r), markers a few pixels off, flat strip shading, ...) and requires the check to fail.

The screenshots under assets/ are written by `python scripts/explore_screenshots.py`.
"""
import importlib.util
import io
import math
import pathlib
import random
import re
import shutil

import numpy as np
import pytest
import torch

import grpo_ba
from grpo_ba import (aggregation_coefficients, clipped_token_loss, group_advantages, mask_from_lengths,
                     positive_share, sign_weights, token_weights)

pytestmark = pytest.mark.slow                      # drives Chromium

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "explore.html"
RULES = ("token", "sequence", "balanced")
TOLERANCE = 1e-6                       # page (float64) against grpo_ba (float32)
QUARTERS = (0.0, 0.25, 0.5, 0.75, 1.0)  # the page's graded rewards
MAX_LENGTH = 400                       # the page's longest answer
PIXEL = 0.75                           # how far a drawn edge may sit from where the formula puts it
INSTALL = "apt-get install chromium chromium-driver"


def browser_missing():
    """What this machine lacks to run the browser tests, or None."""
    missing = [name for name in ("chromium", "chromedriver") if not shutil.which(name)]
    if importlib.util.find_spec("selenium") is None:
        missing.append("selenium (pip install -r requirements/dev.txt)")
    return missing or None


@pytest.fixture(scope="module")
def browser():
    missing = browser_missing()
    if missing:
        pytest.skip(f"no {', '.join(missing)}: docs/explore.html is tested in Chromium; install it with `{INSTALL}`")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--disable-extensions", "--window-size=1280,800", "--force-device-scale-factor=1",
                     "--hide-scrollbars"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


def open_page(browser, width=1280, height=800, page=PAGE):
    """The page as a new reader finds it, at a viewport of width x height CSS pixels."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
    browser.get(page.as_uri())
    return browser


# ------------------------------------------------------------------ the page's controls

# What a drag or a click does to a control. A control that is hidden (a row past G, the reward
# slider of a binary group) cannot be used, and a slider must keep the exact value it was given.
# A length slider is logarithmic (1 to 400 tokens over its positions): a length is set by moving
# it to round(log(L) / log(400) * positions), and the length it then shows must be L.
OPERATE_CONTROLS = """
const problems = [];
const events = arguments[1] || ['input', 'change'];
for (const [id, action, value] of arguments[0]) {
  const control = document.getElementById(id);
  if (!control || control.closest('[hidden]')) { problems.push(`#${id} is not on the page`); continue; }
  if (action === 'click') { control.click(); continue; }
  const position = action === 'length' ? Math.round(Math.log(value) / Math.log(400) * Number(control.max)) : value;
  control.value = String(position);
  for (const name of events) control.dispatchEvent(new Event(name, {bubbles: true}));
  if (Number(control.value) !== position) problems.push(`#${id} took ${control.value}, not ${position}`);
  if (action === 'length') {
    const shown = document.getElementById(id.replace('length-', 'length-value-')).textContent;
    if (Number(shown) !== value) problems.push(`#${id} shows ${shown} tokens, not ${value}`);
  }
}
return problems;
"""

# Every displayed number with its full precision, from the elements a reader sees.
READ_NUMBERS = """
const shown = [...document.querySelectorAll('[data-quantity]')].filter(e => !e.closest('[hidden]'));
const marker = document.getElementById('curve-marker');
return {
  numbers: shown.map(e => ({quantity: e.dataset.quantity, rule: e.dataset.rule || null,
                            response: e.dataset.response === undefined ? null : Number(e.dataset.response),
                            value: e.dataset.value, coefficient: e.dataset.coefficient || null,
                            text: e.textContent, tag: e.tagName.toLowerCase()})),
  marker: marker && {ratio: marker.dataset.lengthRatio, share: marker.dataset.share},
  headline: document.getElementById('headline').textContent,
  groupSize: Number(document.getElementById('group-size').value),
};
"""


def operate(browser, steps, events=None):
    assert browser.execute_script(OPERATE_CONTROLS, steps, events) == []


def set_group(browser, group):
    """Set G, the reward kind, the scaling, each answer's reward and length, through the controls."""
    steps = [("group-size", "set", group["G"]), (f"reward-kind-{group['kind']}", "click", None),
             (f"scale-{group['scale']}", "click", None)]
    for i, (reward, length) in enumerate(zip(group["rewards"], group["lengths"])):
        if group["kind"] == "binary":
            steps.append((f"{'right' if reward == 1 else 'wrong'}-{i}", "click", None))
        else:
            steps.append((f"reward-{i}", "set", reward))
        steps.append((f"length-{i}", "length", length))
    operate(browser, steps)


def value_of(text):
    return None if text == "none" else float(text)


def page_numbers(browser):
    """{(quantity, rule, response): value} from the displayed elements, each checked against its
    displayed rounding; the bars of the charts must carry the same numbers as the tables."""
    read = browser.execute_script(READ_NUMBERS)
    numbers = {}
    for item in read["numbers"]:
        key = (item["quantity"], item["rule"], item["response"])
        value = value_of(item["value"])
        if item["tag"] == "rect":                                  # a bar: no text, same number
            numbers.setdefault(("bar",) + key, value)
            continue
        assert key not in numbers, f"{key} is shown twice"
        numbers[key] = value
        assert_rounded(item["quantity"], value, item["text"])
        if item["coefficient"] is not None:
            numbers[("coefficient", item["rule"], item["response"])] = float(item["coefficient"])
    bars = [k for k in numbers if k[0] == "bar"]
    assert len(bars) == 2 * len(RULES) * read["groupSize"]                # both charts, every answer
    for key in bars:
        assert numbers.pop(key) == numbers[key[1:]], key
    return numbers, read


def assert_rounded(quantity, value, text):
    """The text a reader sees is `value` rounded as the page says it rounds."""
    shown = text.strip().replace("−", "-")
    if quantity == "positive-share":                               # "30.0%", or "—" for no update
        assert (shown == "—") if value is None else abs(float(shown.rstrip("%")) / 100 - value) <= 5e-4 + 1e-12, \
            (quantity, value, text)
    elif quantity in ("total-weight", "token-weight"):             # 4 significant digits
        unit = 0.0 if value == 0 else 10 ** (math.floor(math.log10(abs(value))) - 3)
        assert abs(float(shown) - value) <= 0.5 * unit * (1 + 1e-9) + 1e-300, (quantity, value, text)
    else:                                                          # advantage 3 decimals; W+, W-, J 4
        digits = 3 if quantity == "advantage" else 4
        assert abs(float(shown) - value) <= 0.5 * 10 ** -digits + 1e-12, (quantity, value, text)
        assert shown[0] in "+-" or float(shown) == 0, text


# ------------------------------------------------------------------ grpo_ba's numbers

def grpo_ba_numbers(group):
    """The same quantities from grpo_ba's own functions, float32 tensors summed in float64."""
    size = group["G"]
    mask = mask_from_lengths(torch.tensor(group["lengths"]))
    advantages = group_advantages(torch.tensor(group["rewards"], dtype=torch.float32), size, group["scale"])
    numbers = {("advantage", None, i): a for i, a in enumerate(advantages.tolist())}
    for rule in RULES:
        graded = grpo_ba.rule_for_any_rewards(rule)       # the page's groups have graded rewards
        coefficients = aggregation_coefficients(mask, advantages, size, rule).double()
        weights = token_weights(mask, advantages, size, graded).double()
        for i, length in enumerate(group["lengths"]):
            # one coefficient for every token of an answer, none past its end: what the page draws
            assert torch.allclose(coefficients[i, :length], coefficients[i, 0], rtol=1e-6, atol=0)
            assert not coefficients[i, length:].any()
            numbers[("coefficient", rule, i)] = coefficients[i, 0].item()
            numbers[("token-weight", rule, i)] = weights[i, 0].item()
            numbers[("total-weight", rule, i)] = weights[i].sum().item()
        per_answer = weights.sum(dim=1)
        numbers[("positive-weight", rule, None)] = per_answer[advantages > 0].sum().item()
        numbers[("negative-weight", rule, None)] = per_answer[advantages < 0].sum().item()
        numbers[("positive-share", rule, None)] = positive_share(mask, advantages, size, graded)
        # the rule's own aggregate of the clipped term at ratio 1 (logp = old logp), the logged
        # pg_loss: sum_it c_it l_it with l_it = -A_i (docs/method.md §1, §3)
        at_ratio_one = torch.zeros(mask.shape)
        token_loss = clipped_token_loss(at_ratio_one, at_ratio_one, advantages, mask)
        # the rule as the page reads it: balanced's advantage-mass form, which is the paper's k/G
        # form on binary rewards (grpo_ba.rule_for_any_rewards, choice 7)
        numbers[("loss-at-ratio-one", rule, None)] = graded(token_loss, mask, advantages, size).item()
    return numbers


def assert_page_equals_grpo_ba(page, expected, group):
    assert set(page) == set(expected), sorted(set(page) ^ set(expected), key=str)
    for key, want in expected.items():
        got = page[key]
        if want is None or got is None:
            assert got is None and want is None, (key, got, want, group)
        else:
            assert abs(got - want) <= TOLERANCE, (key, got, want, group)


# ------------------------------------------------------------------ the formulas, from scratch

def formulas(group):
    """What the picture must show for a group, from docs/method.md §1-§4 in float64, written
    here without the page's code or grpo_ba's: advantages, c_i, w_i, W_i, each rule's share, the
    |A|-weighted mean-length ratio and the equal-weighting pair (the longest and shortest answer of
    the sign where their length ratio is largest)."""
    rewards, lengths, size = [float(r) for r in group["rewards"]], group["lengths"], group["G"]
    mean = sum(rewards) / size
    centred = [r - mean for r in rewards]
    spread = math.sqrt(sum(c * c for c in centred) / size)
    tied = len(set(rewards)) == 1
    advantages = [0.0 if tied else (c / (spread + 1e-6) if group["scale"] == "std" else c) for c in centred]
    sides = {"+": [i for i, a in enumerate(advantages) if a > 0], "-": [i for i, a in enumerate(advantages) if a < 0]}
    side_of = {i: s for s, members in sides.items() for i in members}
    out = {"advantages": advantages, "rules": {}}
    for rule in RULES:
        if rule == "token":
            coefficient = [1 / sum(lengths)] * size
        elif rule == "sequence":
            coefficient = [1 / (size * length) for length in lengths]
        else:   # (M_s / G) / sum_{S_s} |A_i| L_i, the same for every token of the sign (§4)
            per_side = {s: sum(abs(advantages[i]) for i in m) / size / sum(abs(advantages[i]) * lengths[i] for i in m)
                        for s, m in sides.items() if m}
            coefficient = [per_side[side_of[i]] if i in side_of else 0.0 for i in range(size)]
        token_weight = [a * c for a, c in zip(advantages, coefficient)]
        total_weight = [w * length for w, length in zip(token_weight, lengths)]
        up = sum(total_weight[i] for i in sides["+"])
        down = sum(total_weight[i] for i in sides["-"])
        share = abs(up) / (abs(up) + abs(down)) if abs(up) + abs(down) > 0 else None
        out["rules"][rule] = dict(coefficient=coefficient, token_weight=token_weight, total_weight=total_weight,
                                  share=share)
    mean_length = {s: sum(abs(advantages[i]) * lengths[i] for i in m) / sum(abs(advantages[i]) for i in m)
                   for s, m in sides.items() if m}
    out["ratio"] = mean_length["+"] / mean_length["-"] if len(mean_length) == 2 else None
    pair = None
    for s in ("+", "-"):
        members = sides[s]
        if len(members) < 2:
            continue
        long = max(members, key=lambda i: (lengths[i], -i))
        short = min((i for i in members if i != long), key=lambda i: (lengths[i], i))
        if pair is None or lengths[long] / lengths[short] > pair[2]:
            pair = (long, short, lengths[long] / lengths[short])
    out["pair"] = pair
    return out


def test_the_formulas_here_give_docs_method_md_worked_example():
    worked = formulas(dict(G=4, kind="binary", scale="std", rewards=[1, 0, 1, 0], lengths=[2, 4, 1, 3]))
    assert worked["rules"]["token"]["share"] == pytest.approx(0.3)
    assert worked["ratio"] == pytest.approx(1.5 / 3.5)
    for rule in ("sequence", "balanced"):
        assert worked["rules"][rule]["share"] == pytest.approx(0.5)
    assert sum(worked["rules"]["token"]["total_weight"]) == pytest.approx(-0.4, rel=1e-5)   # J_tok = 0.4


# ------------------------------------------------------------------ the groups

def sixty_groups():
    """Sixty groups: fixed cases for each edge the issue names, then random ones (seeded)."""
    groups = [
        dict(G=2, kind="binary", scale="std", rewards=[1, 0], lengths=[5, 300]),
        dict(G=2, kind="graded", scale="none", rewards=[0.25, 0.75], lengths=[400, 1]),
        dict(G=16, kind="binary", scale="std", rewards=[1] + [0] * 15, lengths=[17 * (i + 1) for i in range(16)]),
        dict(G=16, kind="graded", scale="std", rewards=[QUARTERS[i % 5] for i in range(16)],
             lengths=[400 - 23 * i for i in range(16)]),
        dict(G=5, kind="binary", scale="std", rewards=[1] * 5, lengths=[10, 20, 30, 40, 50]),      # all right
        dict(G=3, kind="binary", scale="none", rewards=[0] * 3, lengths=[7, 70, 400]),              # all wrong
        dict(G=7, kind="graded", scale="std", rewards=[0.75] * 7, lengths=[3, 1, 4, 1, 5, 9, 2]),  # all equal
        dict(G=5, kind="graded", scale="std", rewards=list(QUARTERS), lengths=[40, 90, 250, 60, 15]),  # A_3 = 0
        dict(G=3, kind="graded", scale="none", rewards=[0, 0.5, 1], lengths=[100, 7, 30]),         # A_2 = 0
        dict(G=4, kind="graded", scale="std", rewards=[1, 0.5, 0.5, 0], lengths=[12, 200, 3, 80]),  # A_2 = A_3 = 0
        dict(G=6, kind="binary", scale="std", rewards=[1, 0, 1, 0, 1, 0], lengths=[120] * 6),      # equal lengths
        dict(G=4, kind="binary", scale="std", rewards=[1, 0, 1, 0], lengths=[2, 4, 1, 3]),         # docs/method.md §3
    ]
    rng = random.Random(2605_04077)
    while len(groups) < 60:
        size = rng.randint(2, 16)
        kind = rng.choice(("binary", "graded"))
        rewards = [rng.choice((0, 1) if kind == "binary" else QUARTERS) for _ in range(size)]
        lengths = [rng.choice((rng.randint(1, 12), rng.randint(1, MAX_LENGTH))) for _ in range(size)]
        groups.append(dict(G=size, kind=kind, scale=rng.choice(("std", "none")), rewards=rewards, lengths=lengths))
    return groups


def test_the_sixty_groups_hold_every_case_the_issue_names():
    groups = sixty_groups()
    advantages = [group_advantages(torch.tensor(g["rewards"], dtype=torch.float32), g["G"], g["scale"])
                  for g in groups]
    assert len(groups) >= 50
    assert {g["G"] for g in groups} >= {2, 16} and {g["kind"] for g in groups} == {"binary", "graded"}
    assert {g["scale"] for g in groups} == {"std", "none"}
    assert any(len(set(g["rewards"])) == 1 and g["kind"] == "graded" for g in groups)
    assert any(len(set(g["rewards"])) == 1 and g["kind"] == "binary" for g in groups)
    assert any((a == 0).any() and (a != 0).any() for a in advantages)          # a zero-advantage answer
    assert all(1 <= length <= MAX_LENGTH for g in groups for length in g["lengths"])


# ------------------------------------------------------------------ the drawing

# The drawn geometry, in each SVG's own coordinates (attributes) or in CSS pixels (boxes).
READ_DRAWING = """
const svg = id => document.getElementById(id);
const num = (e, name) => Number(e.getAttribute(name));
const ticks = (chart, kind) => [...chart.querySelectorAll(`g.tick.${kind}`)].map(g => {
  const line = g.querySelector('line');
  return {x: num(line, 'x1'), y: num(line, 'y1'), label: g.querySelector('text').textContent};
});
const points = line => line.getAttribute('points').trim().split(/\\s+/).map(p => p.split(',').map(Number));
const rect = e => ({x: num(e, 'x'), y: num(e, 'y'), width: num(e, 'width'), height: num(e, 'height')});
const bars = {};
for (const id of ['chart-total', 'chart-token']) {
  bars[id] = {ticks: ticks(svg(id), 'y-tick'),
              bars: [...svg(id).querySelectorAll('rect[data-quantity]')].map(e => ({
                rule: e.dataset.rule, response: Number(e.dataset.response), ...rect(e)}))};
}
const shares = [...document.querySelectorAll('[data-share-track]')].map(track => {
  const fill = track.querySelector('[data-share-fill]').getBoundingClientRect(), box = track.getBoundingClientRect();
  return {rule: track.dataset.shareTrack, pocket: !!track.dataset.pocket, trackLeft: box.left, trackWidth: box.width,
          fillLeft: fill.left, fillWidth: fill.width};
});
const curve = svg('chart-curve'), marker = document.getElementById('curve-marker');
const markerOf = id => { const e = document.getElementById(id); if (!e) return null;
  return e.tagName === 'rect' ? {cx: num(e, 'x') + num(e, 'width') / 2, cy: num(e, 'y') + num(e, 'height') / 2}
                              : {cx: num(e, 'cx'), cy: num(e, 'cy')}; };
const strip = svg('chart-strip'), key = document.getElementById('strip-key');
const equal = svg('chart-equal');
return {
  bars, shares,
  curve: {xTicks: ticks(curve, 'x-tick'), yTicks: ticks(curve, 'y-tick'), frame: rect(curve.querySelector('.plot-frame')),
          points: points(document.getElementById('curve-token')),
          markers: {token: markerOf('curve-marker'), sequence: markerOf('curve-marker-sequence'),
                    balanced: markerOf('curve-marker-balanced')}},
  strip: {rule: document.querySelector('input[name=strip-rule]:checked').value, xTicks: ticks(strip, 'x-tick'),
          keyHeight: num(key, 'height'), keyLabel: document.getElementById('strip-key-label').textContent,
          rows: [...strip.querySelectorAll('rect.strip-row')].map(e => ({
            response: Number(e.dataset.response), rule: e.dataset.rule, opacity: num(e, 'fill-opacity'), ...rect(e)}))},
  equal: {xTicks: ticks(equal, 'x-tick'), yTicks: ticks(equal, 'y-tick'),
          curves: Object.fromEntries([...equal.querySelectorAll('polyline.equal-curve')].map(e => [e.dataset.rule, points(e)])),
          markers: Object.fromEntries([...equal.querySelectorAll('circle.equal-marker')].map(e => [e.dataset.rule,
                                       {cx: num(e, 'cx'), cy: num(e, 'cy')}]))},
};
"""


def label_value(text):
    """A tick label as a number: "−0.25", "75%", "1/100", "400"."""
    text = text.strip().replace("−", "-")
    if text.endswith("%"):
        return float(text[:-1]) / 100
    if text.startswith("1/"):
        return 1 / float(text[2:])
    return float(text)


def axis_from_ticks(ticks, coordinate, log=False):
    """The pixel mapping of an axis, recovered from its drawn ticks alone: a line through
    (label value, tick position), on log10 of the value for a log axis. Returns (to_pixel,
    from_pixel); the ticks themselves must lie on one line."""
    values = np.array([label_value(t["label"]) for t in ticks])
    pixels = np.array([t[coordinate] for t in ticks])
    assert len(values) >= 2, ticks
    along = np.log10(values) if log else values
    slope, intercept = np.polyfit(along, pixels, 1)
    assert np.abs(slope * along + intercept - pixels).max() < 0.05, ("ticks off their own axis", ticks)
    if log:
        return (lambda v: slope * math.log10(v) + intercept), (lambda p: 10 ** ((p - intercept) / slope))
    return (lambda v: slope * v + intercept), (lambda p: (p - intercept) / slope)


def drawing_problems(drawn, expected, group):
    """Every place the drawing departs from the formulas, as readable lines ([] when it is right)."""
    problems = []

    def near(what, got, want, tolerance=PIXEL):
        if not abs(got - want) <= tolerance:
            problems.append(f"{what}: drawn at {got:.2f}, the formula puts it at {want:.2f}")

    # Bars: the y-axis from the ticks; each bar spans from 0 to its value.
    for chart, quantity in (("chart-total", "total_weight"), ("chart-token", "token_weight")):
        y, _ = axis_from_ticks(drawn["bars"][chart]["ticks"], "y")
        for bar in drawn["bars"][chart]["bars"]:
            value = expected["rules"][bar["rule"]][quantity][bar["response"]]
            near(f"{chart} {bar['rule']} answer {bar['response'] + 1} top", bar["y"], y(max(value, 0.0)))
            near(f"{chart} {bar['rule']} answer {bar['response'] + 1} bottom", bar["y"] + bar["height"], y(min(value, 0.0)))
    # Share fills: from the track's left edge, share x the track's width.
    for share in drawn["shares"]:
        if share["trackWidth"] == 0:                                  # the phone's copy, hidden on a wide screen
            continue
        value = expected["rules"][share["rule"]]["share"] or 0.0
        where = f"{'pocket ' if share['pocket'] else ''}share fill {share['rule']}"
        near(f"{where} left", share["fillLeft"], share["trackLeft"], 0.5)
        near(f"{where} width", share["fillWidth"], value * share["trackWidth"], 0.75)
    # The coupling curve: its axes cover every ratio the sliders can make; every point on
    # ratio / (1 + ratio); the markers at the group's ratio, token's at its share.
    curve = drawn["curve"]
    x, ratio_at = axis_from_ticks(curve["xTicks"], "x", log=True)
    y, _ = axis_from_ticks(curve["yTicks"], "y")
    frame = curve["frame"]
    if not (ratio_at(frame["x"]) <= (1 / MAX_LENGTH) * 1.001 and ratio_at(frame["x"] + frame["width"]) >= MAX_LENGTH * 0.999):
        problems.append(f"curve axis covers {ratio_at(frame['x']):.4g} to {ratio_at(frame['x'] + frame['width']):.4g}, "
                        f"not 1/{MAX_LENGTH} to {MAX_LENGTH}")
    near("curve's first point", curve["points"][0][0], frame["x"], 1.0)
    near("curve's last point", curve["points"][-1][0], frame["x"] + frame["width"], 1.0)
    for px, py in curve["points"]:
        r = ratio_at(px)
        near(f"curve point at ratio {r:.4g}", py, y(r / (1 + r)))
    if expected["ratio"] is None:
        if curve["markers"]["token"] is not None:
            problems.append("a marker is drawn for a group with no update")
    else:
        for rule, share in (("token", expected["rules"]["token"]["share"]), ("sequence", 0.5), ("balanced", 0.5)):
            marker = curve["markers"][rule]
            near(f"curve marker {rule} x", marker["cx"], x(expected["ratio"]), 1.0)
            near(f"curve marker {rule} y", marker["cy"], y(share), 1.0)
    # The token strip: L_i cells of one width from 0; a cell's height is |w_i| against the
    # key's full height, its darkness 0.15 + 0.85 |w_i| / key (0 when w_i = 0).
    strip = drawn["strip"]
    tokens_x, _ = axis_from_ticks(strip["xTicks"], "x")
    unit = tokens_x(1) - tokens_x(0)
    full = label_value(re.search(r"full height: ([0-9.e+-]+)", strip["keyLabel"]).group(1))
    weights = expected["rules"][strip["rule"]]["token_weight"]
    if max(map(abs, weights)) > full * (1 + 1e-9):
        problems.append(f"strip key {full} is below the largest weight {max(map(abs, weights))}")
    for row in strip["rows"]:
        i, weight = row["response"], weights[row["response"]]
        if row["rule"] != strip["rule"]:
            problems.append(f"strip row {i + 1} drawn for {row['rule']}, not the chosen {strip['rule']}")
        near(f"strip row {i + 1} start", row["x"], tokens_x(0))
        near(f"strip row {i + 1} width ({group['lengths'][i]} cells)", row["width"], group["lengths"][i] * unit)
        near(f"strip row {i + 1} height", row["height"], abs(weight) / full * strip["keyHeight"], 0.5)
        near(f"strip row {i + 1} shading", row["opacity"], 0 if weight == 0 else 0.15 + 0.85 * abs(weight) / full, 0.01)
    if len(strip["rows"]) != group["G"]:
        problems.append(f"{len(strip['rows'])} strip rows for {group['G']} answers")
    # The equal-weighting view: c_long / c_short against the long answer's length, log-log;
    # sequence L_short / L, token and balanced 1; the markers at the group's own lengths.
    equal = drawn["equal"]
    if expected["pair"] is not None:
        long, short, _ = expected["pair"]
        x, length_at = axis_from_ticks(equal["xTicks"], "x", log=True)
        y, _ = axis_from_ticks(equal["yTicks"], "y", log=True)
        for rule in RULES:
            for px, py in equal["curves"][rule]:
                length = length_at(px)
                near(f"equal-weighting {rule} at length {length:.3g}", py,
                     y(group["lengths"][short] / length if rule == "sequence" else 1.0))
            c = expected["rules"][rule]["coefficient"]
            near(f"equal-weighting marker {rule} x", equal["markers"][rule]["cx"], x(group["lengths"][long]), 1.0)
            near(f"equal-weighting marker {rule} y", equal["markers"][rule]["cy"], y(c[long] / c[short]), 1.0)
    elif equal["curves"]:
        problems.append("an equal-weighting curve without two answers of one sign")
    return problems


def drawn_problems(browser, group, strip_rule):
    """Set a group and a strip rule through the controls, read the picture, and check it."""
    set_group(browser, group)
    operate(browser, [(f"strip-rule-{strip_rule}", "click", None)])
    return drawing_problems(browser.execute_script(READ_DRAWING), formulas(group), group)


def drawing_groups():
    """The edge cases of sixty_groups, a few random ones, the presets' groups, the issue's extremes."""
    extremes = [dict(G=2, kind="binary", scale="std", rewards=[1, 0], lengths=[400, 1]),
                dict(G=2, kind="binary", scale="none", rewards=[1, 0], lengths=[1, 400]),
                dict(G=8, kind="binary", scale="std", rewards=[1] * 4 + [0] * 4,
                     lengths=[20, 20, 20, 20, 300, 240, 210, 280]),                      # coupling, 1-4 at 20
                dict(G=8, kind="binary", scale="std", rewards=[1] * 4 + [0] * 4,
                     lengths=[20, 40, 60, 280, 30, 50, 70, 250])]                         # equal-weighting
    return sixty_groups()[:16] + extremes


def test_drawing_matches_the_formulas_for_every_rule_and_extreme_group(browser):
    open_page(browser)
    for n, group in enumerate(drawing_groups()):
        problems = drawn_problems(browser, group, RULES[n % 3])
        assert problems == [], (group, problems[:5])


def test_drawing_matches_the_formulas_on_a_phone(browser):
    open_page(browser, 390, 844)
    for n, group in enumerate(drawing_groups()[-6:]):
        assert drawn_problems(browser, group, RULES[n % 3]) == [], group


# Each broken picture the page must not draw unnoticed: (what, the line of the page, its broken form).
MUTATIONS = [
    ("bars at half height", "y: Math.min(y(0), y(value)), height: Math.abs(y(value) - y(0)),",
     "y: Math.min(y(0), y(value)), height: Math.abs(y(value) - y(0)) / 2,"),
    ("bars' axis labelled twice as high", 'tickLabel(value).replace("-", "−")', 'tickLabel(2 * value).replace("-", "−")'),
    ("share fill 1 - share", "return share === null ? 0 : 100 * share;", "return share === null ? 0 : 100 * (1 - share);"),
    ("curve marker at 1/ratio", "const markerX = x(ratio);", "const markerX = x(1 / ratio);"),
    ("curve marker 3 px right", 'id: "curve-marker", cx: markerX,', 'id: "curve-marker", cx: markerX + 3,'),
    ("curve marker 3 px up", "cy: y(tokenShare), r: 7,", "cy: y(tokenShare) - 3, r: 7,"),
    ("curve of 1/(1+r)", "y(analyticTokenShare(ratio)).toFixed(2)", "y(1 / (1 + ratio)).toFixed(2)"),
    ("curve axis 1/10 to 10", "const lowest = 1 / MAX_LENGTH, highest = MAX_LENGTH;", "const lowest = 0.1, highest = 10;"),
    ("strip shading flat", "return weight === 0 ? 0 : 0.15 + 0.85 * Math.abs(weight) / scale;",
     "return weight === 0 ? 0 : 0.6;"),
    ("strip cells at half height", "const cellHeight = Math.abs(weight) / weightScale * STRIP_CELL;",
     "const cellHeight = Math.abs(weight) / weightScale * STRIP_CELL / 2;"),
    ("strip row one cell too long", "const rowWidth = length * unit;", "const rowWidth = (length + 1) * unit;"),
    ("equal-weighting sequence flat", "yOf(c[long] / c[short]).toFixed(2)", "yOf(rule === 'sequence' ? 1 : c[long] / c[short]).toFixed(2)"),
    ("equal-weighting markers 3 px right", "cx: x(lengths[long]), cy:", "cx: x(lengths[long]) + 3, cy:"),
]


def mutated_copy(tmp_path, old, new):
    source = PAGE.read_text()
    assert source.count(old) == 1, f"the page no longer has exactly one {old!r}: update MUTATIONS"
    path = tmp_path / "explore.html"
    path.write_text(source.replace(old, new))
    return path


@pytest.mark.parametrize("what, old, new", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_drawing_checker_catches_each_broken_picture(browser, tmp_path, what, old, new):
    open_page(browser, page=mutated_copy(tmp_path, old, new))
    caught = []
    for n, group in enumerate(drawing_groups()[-4:] + drawing_groups()[:2]):
        caught += drawn_problems(browser, group, RULES[n % 3])
    assert caught, f"a page with {what} passes the drawing check"


def test_page_weights_equal_grpo_ba_on_60_groups_set_through_its_controls(browser):
    open_page(browser)
    for group in sixty_groups():
        set_group(browser, group)
        numbers, read = page_numbers(browser)
        assert read["groupSize"] == group["G"]
        expected = grpo_ba_numbers(group)
        assert_page_equals_grpo_ba(numbers, expected, group)
        # the marked point of the analytic curve is token's share, at the group's length ratio
        if expected[("positive-share", "token", None)] is None:
            assert read["marker"] is None
        else:
            ratio = float(read["marker"]["ratio"])
            assert abs(float(read["marker"]["share"]) - ratio / (1 + ratio)) <= 1e-12
            assert abs(float(read["marker"]["share"]) - expected[("positive-share", "token", None)]) <= TOLERANCE


def test_sign_weights_of_grpo_ba_agree_with_the_page_on_the_presets_groups(browser):
    """W+ and W- shown for each preset are grpo_ba.sign_weights' (the presets are set by their buttons)."""
    for name in ("equal", "worked", "coupling", "equal-weighting"):
        numbers, read, lengths, right = show_preset(browser, name)
        mask = mask_from_lengths(torch.tensor(lengths))
        advantages = group_advantages(torch.tensor([1.0 if r else 0.0 for r in right]), len(lengths))
        for rule in RULES:
            up, down = sign_weights(mask, advantages, len(lengths), rule)
            assert abs(numbers[("positive-weight", rule, None)] - up.item()) <= TOLERANCE
            assert abs(numbers[("negative-weight", rule, None)] - down.item()) <= TOLERANCE


# ------------------------------------------------------------------ the presets

def show_preset(browser, name, width=1280, height=800):
    open_page(browser, width, height)
    operate(browser, [(f"preset-{name}", "click", None)])
    numbers, read = page_numbers(browser)
    lengths = [int(browser.find_element("id", f"length-value-{i}").text) for i in range(read["groupSize"])]
    right = [browser.find_element("id", f"right-{i}").is_selected() for i in range(read["groupSize"])]
    return numbers, read, lengths, right


def test_worked_example_preset_gives_docs_method_md_section_3_numbers(browser):
    numbers, _, lengths, right = show_preset(browser, "worked")
    assert lengths == [2, 4, 1, 3] and right == [True, False, True, False]
    close = lambda key, want: abs(numbers[key] - want) <= 1e-5          # A = 0.5 / (0.5 + 1e-6), not 1
    assert close(("loss-at-ratio-one", "token", None), 0.4) and close(("positive-share", "token", None), 0.3)
    assert close(("positive-weight", "token", None), 0.3) and close(("negative-weight", "token", None), -0.7)
    for rule in ("sequence", "balanced"):
        assert close(("positive-weight", rule, None), 0.5) and close(("negative-weight", rule, None), -0.5)
        assert close(("loss-at-ratio-one", rule, None), 0.0)
    assert browser.find_element("id", "share-token").text == "30.0%"
    assert browser.find_element("id", "loss-token").text == "+0.4000"


def test_coupling_preset_gives_long_wrong_answers_most_of_tokens_weight_and_balanced_exactly_half(browser):
    numbers, read, lengths, right = show_preset(browser, "coupling")
    right_lengths = [length for length, is_right in zip(lengths, right) if is_right]
    wrong_lengths = [length for length, is_right in zip(lengths, right) if not is_right]
    assert right_lengths and wrong_lengths and max(right_lengths) < min(wrong_lengths)
    assert numbers[("positive-share", "token", None)] < 0.5
    assert numbers[("positive-share", "balanced", None)] == pytest.approx(0.5, abs=1e-12)
    assert numbers[("positive-share", "sequence", None)] == pytest.approx(0.5, abs=1e-12)
    assert numbers[("loss-at-ratio-one", "token", None)] > 0                   # the drift: a push down
    mean_ratio = (sum(right_lengths) / len(right_lengths)) / (sum(wrong_lengths) / len(wrong_lengths))
    assert float(read["marker"]["ratio"]) == pytest.approx(mean_ratio, rel=1e-12)
    assert "Sign-length coupling" in read["headline"] and "Drift" in read["headline"]


def test_equal_weighting_preset_shows_sequence_equal_weighting_alone(browser):
    """Both signs have the same mean length: no coupling and no drift; only sequence weighs a
    long answer's tokens less, as 1/L_i, while its total stays that of a short one."""
    numbers, read, lengths, right = show_preset(browser, "equal-weighting")
    signs = [[length for length, r in zip(lengths, right) if r == side] for side in (True, False)]
    assert sum(signs[0]) / len(signs[0]) == sum(signs[1]) / len(signs[1])             # same mean length
    assert all(max(side) >= 4 * min(side) for side in signs)                           # a long and a short each
    for rule in RULES:
        assert numbers[("positive-share", rule, None)] == pytest.approx(0.5, abs=1e-9)
        assert abs(numbers[("loss-at-ratio-one", rule, None)]) <= 1e-9
    per_token = lambda rule, i: numbers[("token-weight", rule, i)]
    long, short = lengths.index(max(signs[0])), lengths.index(min(signs[0]))
    assert per_token("sequence", long) == pytest.approx(per_token("sequence", short) * lengths[short] / lengths[long])
    assert numbers[("total-weight", "sequence", long)] == pytest.approx(numbers[("total-weight", "sequence", short)])
    for rule in ("token", "balanced"):
        assert per_token(rule, long) == pytest.approx(per_token(rule, short))
    factor = lengths[long] / lengths[short]
    assert (f"answer {long + 1} ({lengths[long]} tokens) counts {factor:.1f}× less than one of answer {short + 1}"
            in read["headline"]), read["headline"]
    assert "token, balanced: the same" in read["headline"] and "No drift" in read["headline"]


def test_all_equal_preset_moves_nothing(browser):
    numbers, read, _, right = show_preset(browser, "all-equal")
    assert all(right)
    assert all(value == 0 for key, value in numbers.items() if key[0] != "positive-share" and key[0] != "coefficient")
    assert all(numbers[("positive-share", rule, None)] is None for rule in RULES)
    assert browser.find_element("id", "share-balanced").text == "—"
    assert read["marker"] is None and "no rule moves" in read["headline"]


def test_equal_lengths_preset_gives_the_three_rules_one_weight(browser):
    numbers, _, lengths, _ = show_preset(browser, "equal")
    assert len(set(lengths)) == 1
    for i in range(len(lengths)):
        weights = [numbers[("token-weight", rule, i)] for rule in RULES]
        assert max(weights) - min(weights) <= 1e-15


# ------------------------------------------------------------------ the words

VISIBLE_TEXT = "return document.body.innerText;"                # closed <details> are not rendered


def test_the_page_names_both_biases_as_the_paper_does(browser):
    open_page(browser)
    text = browser.execute_script(VISIBLE_TEXT)
    assert "Sign-length coupling" in text and "Sequence equal-weighting" in text
    assert "devaluation" not in PAGE.read_text().lower()
    for kind in ("binary", "graded"):                               # the side words fit their sentences
        operate(browser, [(f"reward-kind-{kind}", "click", None)])
        text = browser.execute_script(VISIBLE_TEXT)
        doubled = re.search(r"\b([a-z]+)\s+\1\b", text, re.IGNORECASE)
        assert doubled is None, text[max(0, doubled.start() - 60):doubled.end() + 20]


def test_jargon_is_defined_and_code_names_and_sections_are_folded_away(browser):
    open_page(browser)
    terms = browser.execute_script("return [...document.querySelectorAll('#glossary dt')].map(e => e.textContent)")
    for term in ("Advantage Ai", "Coefficient cit", "W+ and W−", "Ratio 1", "Drift"):
        assert any(t.startswith(term) for t in terms), (term, terms)
    visible = browser.execute_script(VISIBLE_TEXT)
    for folded in ("§", "pos_share", "token_weights", "pg_loss", "positive_share", "test"):
        assert folded not in visible, folded
    browser.execute_script("document.querySelector('#implementer-notes summary').click()")
    notes = browser.execute_script("return document.getElementById('implementer-notes').innerText")
    assert "docs/method.md" in notes and "not the paper's" in notes and "pos_share" in notes


def test_predict_then_drag_exercise_sets_each_step_up_and_reveals_answers_on_demand(browser):
    open_page(browser)
    steps = browser.execute_script("""return [...document.querySelectorAll('#exercise li')].map(li => ({
        preset: li.querySelector('button[data-preset]').id,
        open: li.querySelector('details').open, summary: li.querySelector('summary').textContent}))""")
    assert len(steps) >= 5 and not any(step["open"] for step in steps)
    expected_size = {"exercise-3": "8", "exercise-4": "8", "exercise-6": "8", "exercise-1": "6"}
    for step in steps:
        operate(browser, [(step["preset"], "click", None)])
        if step["preset"] in expected_size:
            assert browser.find_element("id", "group-size-value").text == expected_size[step["preset"]]
    browser.execute_script("document.querySelector('#exercise li:nth-child(4) summary').click()")
    answer = browser.execute_script("return document.querySelector('#exercise li:nth-child(4) details').innerText")
    assert "14 times less" in answer and "sequence equal-weighting" in answer


def test_opening_an_answer_says_whether_the_guess_picked_before_was_right(browser):
    from selenium.webdriver.support.ui import WebDriverWait
    open_page(browser)
    correct = browser.execute_script("""return [...document.querySelectorAll('#exercise li')].map(li =>
        [...li.querySelectorAll('.guess input')].filter(e => e.hasAttribute('data-correct')).map(e => e.value))""")
    assert len(correct) >= 5 and all(len(right) == 1 for right in correct), correct
    assert correct[1] == ["down"] and correct[3] == ["sequence"]          # token's share falls; sequence differs
    verdict = lambda n: WebDriverWait(browser, 5).until(
        lambda b: b.find_element("id", f"verdict-{n}").get_attribute("textContent"))
    operate(browser, [("guess-2-3", "click", None), ("guess-4-1", "click", None)])     # down (right), token (wrong)
    for n in (2, 4, 6):
        browser.execute_script(f"document.getElementById('answer-{n}').click()")
    assert "right" in verdict(2) and "not what the page shows" in verdict(4) and "No guess" in verdict(6)


def test_exercise_answers_say_what_the_page_shows(browser):
    """Step 2's numbers: answer 2 dragged from 120 to 400 tokens in the equal-lengths group."""
    open_page(browser)
    operate(browser, [("exercise-2", "click", None), ("length-1", "length", 400)])
    answer = browser.execute_script("return document.querySelector('#exercise li:nth-child(2) details').textContent")
    share, loss = browser.find_element("id", "share-token").text, browser.find_element("id", "loss-token").text
    assert share == "36.0%" and f"falls to {share}" in answer
    assert loss == "+0.2800" and "+0.280" in answer
    operate(browser, [("exercise-3", "click", None)])
    assert browser.find_element("id", "share-token").text in browser.execute_script(
        "return document.querySelector('#exercise li:nth-child(3) details').textContent")


# ------------------------------------------------------------------ dragging

READ_TICKS = """return [...document.querySelectorAll('#chart-total g.y-tick, #chart-token g.y-tick')].map(g =>
    [g.querySelector('line').getAttribute('y1'), g.querySelector('text').textContent]).join(' ')
    + ' | ' + document.getElementById('strip-key-label').textContent;"""


def test_axes_stay_put_while_dragging_and_the_bars_before_the_drag_are_outlined(browser):
    open_page(browser)
    # sequence's strip: its largest token weight, 1 / (6 x 120), does not move in this drag
    operate(browser, [("preset-equal", "click", None), ("strip-rule-sequence", "click", None), ("length-1", "length", 400)])
    before = browser.execute_script(READ_TICKS)
    assert browser.execute_script("return document.querySelectorAll('#chart-total rect.ghost').length") == 0
    for length in (300, 200, 120):                                 # mid-drag: input events only
        operate(browser, [("length-1", "length", length)], ["input"])
        assert browser.execute_script(READ_TICKS) == before
    ghosts = browser.execute_script("return document.querySelectorAll('#chart-total rect.ghost').length")
    assert ghosts == 3 * 6
    operate(browser, [("length-1", "length", 120)], ["change"])      # released: the axes fit again
    assert browser.execute_script(READ_TICKS) != before
    assert browser.execute_script("return document.querySelectorAll('#chart-total rect.ghost').length") == 0


RECORD_SLIDER = """const slider = document.getElementById(arguments[0]); window.slidden = [];
slider.addEventListener('input', e => window.slidden.push(Number(e.target.value)), true);
const b = slider.getBoundingClientRect(); return [b.left, b.width, b.top + b.height / 2];"""


def pointer(browser, *moves):
    """A real mouse: each move is ('move', x, y), 'down' or 'up', in viewport pixels."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    actions = ActionBuilder(browser)
    for move in moves:
        if move == "down":
            actions.pointer_action.pointer_down()
        elif move == "up":
            actions.pointer_action.pointer_up()
        else:
            actions.pointer_action.move_to_location(move[1], move[2])
    actions.perform()


@pytest.mark.parametrize("width, height", [(390, 844), (1280, 800)])
def test_lengths_1_to_10_are_set_by_dragging_the_log_slider(browser, width, height):
    """Each length from 1 to 10 has a stretch of the slider of its own (4 px or more on a phone,
    2 on a desktop mouse), and a real drag of the thumb to it sets it."""
    open_page(browser, width, height)
    operate(browser, [("preset-equal", "click", None)])                   # answer 3 at 120 tokens
    browser.execute_script("document.getElementById('length-2').scrollIntoView({block: 'center'})")
    left, size, middle = browser.execute_script(RECORD_SLIDER, "length-2")
    # the pixel -> position map of the slider, from two clicks on its track away from the thumb
    # (the raw positions the slider reports, before the page rounds them to a whole length)
    clicks = [round(left + size * 0.1), round(left + size * 0.5)]
    for x in clicks:
        pointer(browser, ("move", x, middle), "down", "up")
    raw = browser.execute_script("return window.slidden.splice(0)")
    (p0, p1) = raw[0], raw[-1]
    per_pixel = (p1 - p0) / (clicks[1] - clicks[0])
    pixel_of = lambda position: clicks[0] + (position - p0) / per_pixel
    positions = int(browser.find_element("id", "length-2").get_attribute("max"))
    position_of = lambda length: math.log(length) / math.log(MAX_LENGTH) * positions
    for length in range(1, 11):
        low, high = position_of(max(length - 0.5, 1)), position_of(length + 0.5)    # rounds to `length`
        assert (high - low) / per_pixel >= (4 if width < 600 else 2), (length, (high - low) / per_pixel)
        shown = int(browser.find_element("id", "length-value-2").text)
        thumb = pixel_of(position_of(shown))
        press = round(thumb)
        target = round(pixel_of((low + high) / 2) + (press - thumb))       # keep the grip's offset
        pointer(browser, ("move", press, middle), "down", ("move", (press + target) // 2, middle),
                ("move", target, middle), "up")
        assert browser.find_element("id", "length-value-2").text == str(length), (length, press, target)


def test_dragging_a_token_strip_rows_end_changes_its_length(browser):
    from selenium.webdriver.common.action_chains import ActionChains
    open_page(browser)
    operate(browser, [("preset-worked", "click", None)])                    # lengths 2, 4, 1, 3
    browser.execute_script("document.getElementById('chart-strip').scrollIntoView({block: 'center'})")
    drawn = browser.execute_script(READ_DRAWING)["strip"]
    tokens_x, _ = axis_from_ticks(drawn["xTicks"], "x")
    handle = browser.find_element("css selector", "#chart-strip [data-handle='0'] .handle-target")
    (ActionChains(browser).move_to_element(handle).click_and_hold()
     .move_by_offset(round(tokens_x(5) - tokens_x(2)), 0).release().perform())       # two cells' end to five's
    assert browser.find_element("id", "length-value-0").text == "5"
    numbers, _ = page_numbers(browser)
    expected = formulas(dict(G=4, kind="binary", scale="std", rewards=[1, 0, 1, 0], lengths=[5, 4, 1, 3]))
    assert numbers[("positive-share", "token", None)] == pytest.approx(expected["rules"]["token"]["share"], abs=1e-12)


# ------------------------------------------------------------------ graded rewards

def test_graded_rewards_survive_a_trip_through_binary(browser):
    open_page(browser)
    group = dict(G=6, kind="graded", scale="std", rewards=[0.25, 0.75, 1, 0, 0.5, 0.25], lengths=[9, 40, 3, 120, 7, 60])
    set_group(browser, group)
    operate(browser, [("reward-kind-binary", "click", None), ("reward-kind-graded", "click", None)])
    rewards = [float(browser.find_element("id", f"reward-{i}").get_attribute("value")) for i in range(6)]
    assert rewards == group["rewards"]


def test_graded_headline_says_above_and_below_the_mean_and_its_factor_is_the_lengths(browser):
    """The group the issue names: equal lengths, graded, answer 1 at 400 tokens, answer 3 at
    reward 3/4 and 40 tokens: a token of answer 1 counts 10x less under sequence, and the same
    under token and balanced (both above the mean)."""
    open_page(browser)
    operate(browser, [("preset-equal", "click", None), ("reward-kind-graded", "click", None),
                      ("length-0", "length", 400), ("reward-2", "set", 0.75), ("length-2", "length", 40)])
    numbers, read = page_numbers(browser)
    coefficient = lambda rule, i: numbers[("coefficient", rule, i)]
    assert coefficient("sequence", 2) / coefficient("sequence", 0) == pytest.approx(10)
    for rule in ("token", "balanced"):
        assert coefficient(rule, 2) == pytest.approx(coefficient(rule, 0))
    assert "a token of answer 1 (400 tokens) counts 10.0× less than one of answer 3 (40)" in read["headline"]
    assert "token, balanced: the same" in read["headline"] and "above the mean" in read["headline"]
    views = browser.execute_script("return document.querySelector('.views').innerText")
    assert "right answers" not in views and "wrong answers" not in views and "below" in views


def test_headline_factor_is_sequences_length_ratio_on_random_groups(browser):
    open_page(browser)
    for group in sixty_groups()[12:30]:
        set_group(browser, group)
        headline = browser.find_element("id", "headline-equal-weighting").text
        pair = formulas(group)["pair"]
        if formulas(group)["ratio"] is None:                       # no update: nothing to compare
            assert "no rule moves" in browser.find_element("id", "headline").text
            continue
        if pair is None or pair[2] == 1:
            assert "does not show" in headline or "none here" in headline, headline
            continue
        long, short, ratio = pair
        c = formulas(group)["rules"]["sequence"]["coefficient"]
        assert c[short] / c[long] == pytest.approx(ratio)
        factor = f"{ratio:.0f}" if ratio >= 100 else f"{ratio:.1f}"
        assert (f"answer {long + 1} ({group['lengths'][long]} tokens) counts {factor}× less than one of answer "
                f"{short + 1} ({group['lengths'][short]})") in headline, (headline, group)


# ------------------------------------------------------------------ the keyboard

CONTROLS = """
const visible = e => !e.closest('[hidden]') && e.getClientRects().length > 0;
return [...document.querySelectorAll('input, button, select, textarea, summary')].filter(visible).map(e => ({
  key: e.type === 'radio' ? 'radio:' + e.name : '#' + e.id,
  id: e.id, type: e.type || e.tagName.toLowerCase(),
  label: (e.labels && e.labels.length ? [...e.labels].map(l => l.textContent).join(' ') : '')
         + (e.getAttribute('aria-label') || '')
         + (e.tagName === 'BUTTON' || e.tagName === 'SUMMARY' ? e.textContent : ''),
}));
"""
FOCUSED = ("const e = document.activeElement;"
           "return e.type === 'radio' ? 'radio:' + e.name : (e.id ? '#' + e.id : e.tagName.toLowerCase());")


def press(browser, *keys):
    from selenium.webdriver.common.action_chains import ActionChains
    ActionChains(browser).send_keys(*keys).perform()


def tab_stops(browser, count):
    from selenium.webdriver.common.keys import Keys
    stops = []
    for _ in range(count):
        press(browser, Keys.TAB)
        stops.append(browser.execute_script(FOCUSED))
    return stops


def arrow_changes(browser, element_id, key, watched_id):
    """Focus a control, press one arrow key: does the control, and what it drives, change?"""
    read = ("const c = document.getElementById(arguments[0]), w = document.getElementById(arguments[1]);"
            "return [c.type === 'radio' ? document.querySelector(`input[name='${c.name}']:checked`).id : c.value,"
            "        w.dataset.value || w.textContent];")
    browser.execute_script("document.getElementById(arguments[0]).focus()", element_id)
    before = browser.execute_script(read, element_id, watched_id)
    press(browser, key)
    after = browser.execute_script(read, element_id, watched_id)
    return before[0] != after[0] and before[1] != after[1]


@pytest.mark.parametrize("kind", ["binary", "graded"])
def test_tab_reaches_every_control_and_each_has_a_label(browser, kind):
    open_page(browser)
    browser.execute_script(OPERATE_CONTROLS, [(f"reward-kind-{kind}", "click", None)])
    browser.execute_script("document.activeElement.blur()")
    controls = browser.execute_script(CONTROLS)
    assert not [c for c in controls if not c["label"].strip()], "controls without a label"
    stops = tab_stops(browser, len(controls) + 2)
    assert {c["key"] for c in controls} <= set(stops)


def test_arrow_keys_change_every_kind_of_control_and_enter_runs_presets(browser):
    from selenium.webdriver.common.keys import Keys
    open_page(browser)
    assert arrow_changes(browser, "group-size", Keys.ARROW_RIGHT, "group-size-value")
    for i in range(7):                                          # G went from 6 to 7
        assert arrow_changes(browser, f"length-{i}", Keys.ARROW_RIGHT, "loss-token"), i
        checked = f"right-{i}" if i % 2 == 0 else f"wrong-{i}"             # the equal preset alternates
        assert arrow_changes(browser, checked, Keys.ARROW_RIGHT, f"advantage-{i}"), i
    assert arrow_changes(browser, "scale-std", Keys.ARROW_RIGHT, "advantage-0")
    assert arrow_changes(browser, "reward-kind-binary", Keys.ARROW_RIGHT, "answer-head")
    for i in range(7):                                          # graded rewards, now shown
        reward = float(browser.find_element("id", f"reward-{i}").get_attribute("value"))
        assert arrow_changes(browser, f"reward-{i}", Keys.ARROW_LEFT if reward > 0 else Keys.ARROW_RIGHT,
                             f"advantage-{i}"), i
    browser.execute_script("document.getElementById('preset-worked').focus()")
    press(browser, Keys.ENTER)
    assert browser.find_element("id", "group-size-value").text == "4"
    browser.execute_script("document.getElementById('preset-coupling').focus()")
    press(browser, Keys.SPACE)
    assert browser.find_element("id", "group-size-value").text == "8"
    browser.execute_script("document.querySelector('#figure-total summary').focus()")
    press(browser, Keys.ENTER)
    assert browser.execute_script("return document.querySelector('#figure-total details').open")


# ------------------------------------------------------------------ the screen

OVERFLOW = """
const width = document.documentElement.clientWidth;
const outside = [...document.body.querySelectorAll('*')].filter(e => {
  if (e.closest('.sr-only')) return false;
  const box = e.getBoundingClientRect();
  return box.width > 0 && (box.right > width + 0.5 || box.left < -0.5);
}).map(e => e.tagName + (e.id ? '#' + e.id : ''));
return {scrollWidth: document.documentElement.scrollWidth, width, outside,
        bars: document.querySelectorAll('#chart-total rect[data-value]').length};
"""
BOX = "const b = document.getElementById(arguments[0]).getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom];"


@pytest.mark.parametrize("width, height", [(1280, 800), (1024, 768), (768, 1024), (390, 844), (320, 640)])
def test_nothing_scrolls_sideways_and_every_column_is_on_screen(browser, width, height):
    open_page(browser, width, height)
    for preset, size in (("coupling", 8), ("equal-weighting", 8)):
        operate(browser, [(f"preset-{preset}", "click", None)])
        layout = browser.execute_script(OVERFLOW)
        assert layout["scrollWidth"] <= layout["width"] and layout["outside"] == [], layout
        assert layout["bars"] == 3 * size
    operate(browser, [("group-size", "set", 16), ("reward-kind-graded", "click", None)])
    layout = browser.execute_script(OVERFLOW)
    assert layout["scrollWidth"] <= layout["width"] and layout["outside"] == [], layout
    for i in (0, 15):                                              # the A_i column is whole
        left, _, right, _ = browser.execute_script(BOX, f"advantage-{i}")
        assert 0 <= left and right <= width


def test_at_1024x768_the_shares_and_the_curve_sit_beside_the_controls_above_the_fold(browser):
    for preset in ("coupling", "equal-weighting", "worked"):
        show_preset(browser, preset, 1024, 768)
        controls_right = browser.execute_script(
            "return document.querySelector('.controls').getBoundingClientRect().right")
        for figure in ("figure-share", "figure-curve"):
            left, top, right, bottom = browser.execute_script(BOX, figure)
            assert left >= controls_right and right <= 1024 and top >= 0 and bottom <= 768, (preset, figure, bottom)


def test_on_a_phone_the_shares_stay_in_view_while_a_length_is_changed(browser):
    open_page(browser, 390, 844)
    operate(browser, [("preset-coupling", "click", None)])
    for i, length in ((0, 5), (4, 12), (7, 400)):
        browser.execute_script("document.getElementById(arguments[0]).scrollIntoView({block: 'center'})", f"length-{i}")
        operate(browser, [(f"length-{i}", "length", length)])
        _, slider_top, _, slider_bottom = browser.execute_script(BOX, f"length-{i}")
        left, top, right, bottom = browser.execute_script(BOX, "pocket")
        assert 0 <= top and bottom < slider_top and slider_bottom <= 844 and bottom - top >= 40, (top, bottom, slider_top)
        for rule in RULES:
            pocket = browser.find_element("css selector", f"[data-pocket-share='{rule}']").text
            assert pocket == browser.find_element("id", f"share-{rule}").text
    drawn = browser.execute_script(READ_DRAWING)
    assert sum(share["pocket"] and share["trackWidth"] > 0 for share in drawn["shares"]) == 3


TARGETS = """
const visible = e => !e.closest('[hidden]') && e.getClientRects().length > 0 && !e.closest('details:not([open]) > :not(summary)');
return [...document.querySelectorAll('input, button, summary, [data-handle] .handle-target')].filter(visible).map(e => {
  const b = e.getBoundingClientRect();
  return {id: e.id || e.tagName, width: b.width, height: b.height};
}).filter(t => t.width < 24 || t.height < 24);
"""


@pytest.mark.parametrize("width, height", [(1280, 800), (390, 844)])
def test_every_touch_target_is_at_least_24_pixels(browser, width, height):
    open_page(browser, width, height)
    for kind in ("binary", "graded"):
        operate(browser, [("preset-worked", "click", None), (f"reward-kind-{kind}", "click", None)])
        assert browser.execute_script(TARGETS)[:1] == [], kind


HEADLINE = "const h = document.getElementById('headline'); return [h.getBoundingClientRect().height, h.scrollHeight, h.clientHeight];"


@pytest.mark.parametrize("width, height", [(1280, 800), (1024, 768), (768, 1024), (390, 844), (320, 640)])
def test_headline_keeps_its_height_and_shows_all_its_words(browser, width, height):
    open_page(browser, width, height)
    heights = set()
    chart_tops = set()
    for preset in ("equal", "worked", "coupling", "equal-weighting", "all-equal"):
        operate(browser, [(f"preset-{preset}", "click", None)])
        box, scroll, client = browser.execute_script(HEADLINE)
        heights.add(round(box, 1))
        chart_tops.add(round(browser.execute_script(BOX, "figure-share")[1] + browser.execute_script(
            "return window.scrollY"), 1))
        assert scroll <= client, (preset, scroll, client)
    for group in [sixty_groups()[3], sixty_groups()[1]] + sixty_groups()[20:26]:
        set_group(browser, group)
        box, scroll, client = browser.execute_script(HEADLINE)
        heights.add(round(box, 1))
        assert scroll <= client, (group, scroll, client)
    assert len(heights) == 1, heights
    if width > 760:                                                # the charts beside the controls stay put
        assert len(chart_tops) == 1, chart_tops


CURVE_TEXT = """
const svg = document.getElementById('chart-curve'), frame = svg.querySelector('.plot-frame').getBoundingClientRect();
const outer = svg.getBoundingClientRect(), label = document.getElementById('curve-label').getBoundingClientRect();
const box = b => [b.left, b.top, b.right, b.bottom];
return {svg: box(outer), frame: box(frame), label: box(label),
        texts: [...svg.querySelectorAll('text')].map(t => box(t.getBoundingClientRect())),
        ticks: [...svg.querySelectorAll('g.tick text')].map(t => box(t.getBoundingClientRect()))};
"""


@pytest.mark.parametrize("width", [1280, 390])
def test_curve_labels_stay_inside_the_plot_for_the_extreme_groups(browser, width):
    open_page(browser, width, 800)
    overlap = lambda a, b: a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
    inside = lambda a, b, slack=0.5: a[0] >= b[0] - slack and a[1] >= b[1] - slack and a[2] <= b[2] + slack and a[3] <= b[3] + slack
    for rewards, lengths in (([1, 0], [400, 1]), ([1, 0], [1, 400]), ([1, 0], [1, 1]), ([1, 0, 0], [399, 1, 1]),
                             ([1, 1, 0], [2, 1, 400])):
        set_group(browser, dict(G=len(rewards), kind="binary", scale="std", rewards=rewards, lengths=lengths))
        read = browser.execute_script(CURVE_TEXT)
        assert all(inside(text, read["svg"]) for text in read["texts"]), (lengths, read)
        assert inside(read["label"], read["frame"]), (lengths, read["label"], read["frame"])
        assert not any(overlap(read["label"], tick) for tick in read["ticks"]), lengths


@pytest.mark.parametrize("width, height", [(1280, 800), (390, 844)])
def test_screenshot_is_not_blank(browser, width, height):
    open_page(browser, width, height)
    operate(browser, [("preset-coupling", "click", None)])
    png = browser.get_screenshot_as_png()
    ink, colours, _ = screen_contents(png, width, height)
    assert ink > 0.03 and colours > 100, (ink, colours)               # the first screen is not blank
    # scrolled to, the charts are drawn
    browser.execute_script("document.getElementById('figure-total').scrollIntoView()")
    _, _, vermillion = screen_contents(browser.get_screenshot_as_png(), width, height)
    assert vermillion > 200, vermillion                                 # the token rule's bars


def screen_contents(png, width, height):
    """(share of non-white pixels, number of colours, pixels of the token rule's vermillion)."""
    from PIL import Image
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.size == (width, height)
    pixels = np.asarray(image).reshape(-1, 3).astype(int)
    ink = (pixels.min(axis=1) < 200).mean()
    colours = len(np.unique(pixels @ np.array([1 << 16, 1 << 8, 1])))
    vermillion = (np.abs(pixels - [0xD5, 0x5E, 0x00]).max(axis=1) < 12).sum()
    return ink, colours, vermillion


def test_page_loads_nothing_from_the_network(browser):
    open_page(browser)
    set_group(browser, sixty_groups()[3])
    assert browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)") == []
    source = PAGE.read_text()
    assert "<script src" not in source and "@import" not in source and "url(" not in source.replace("url(#strip-cells)", "")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", source)
