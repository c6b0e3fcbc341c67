"""docs/explore.html in a real browser: its numbers are grpo_ba.py's, each preset shows what its
name says, every control works from the keyboard alone, and the page fits a projector and a phone.

Chromium (Debian's chromium and chromium-driver) is driven by selenium (requirements-dev.txt).
Without them every test here skips with one line naming `apt-get install chromium chromium-driver`
(tests/conftest.py prints it even under -q). Groups are set through the page's own controls, as a
drag or a click sets them (a slider gets its value and an input event, a radio or button a click),
never by calling the page's functions; numbers are read from the data-value attribute of what the
page displays, and the displayed text must be that number rounded.

The README's screenshot, assets/explore.png (the coupling preset at 1280x800), is written by:
    EXPLORE_SCREENSHOT=assets/explore.png python -m pytest -q tests/course/test_explore_page.py -k screenshot
"""
import importlib.util
import io
import math
import os
import pathlib
import random
import shutil

import numpy as np
import pytest
import torch

from grpo_ba import (aggregation_coefficients, group_advantages, mask_from_lengths, positive_share,
                     token_weights)

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "explore.html"
RULES = ("token", "sequence", "balanced")
TOLERANCE = 1e-6                       # page (float64) against grpo_ba (float32)
QUARTERS = (0.0, 0.25, 0.5, 0.75, 1.0)  # the page's graded rewards
MAX_LENGTH = 400                       # the page's longest answer
INSTALL = "apt-get install chromium chromium-driver"


def browser_missing():
    """What this machine lacks to run the browser tests, or None."""
    missing = [name for name in ("chromium", "chromedriver") if not shutil.which(name)]
    if importlib.util.find_spec("selenium") is None:
        missing.append("selenium (pip install -r requirements-dev.txt)")
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
                     "--disable-extensions", "--window-size=1280,800", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


def open_page(browser, width=1280, height=800):
    """The page as a new reader finds it, at a viewport of width x height CSS pixels."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
    browser.get(PAGE.as_uri())
    return browser


# ------------------------------------------------------------------ the page's controls

# What a drag or a click does to a control. A control that is hidden (a row past G, the reward
# slider of a binary group) cannot be used, and a slider must keep the exact value it was given.
OPERATE_CONTROLS = """
const problems = [];
for (const [id, action, value] of arguments[0]) {
  const control = document.getElementById(id);
  if (!control || control.closest('[hidden]')) { problems.push(`#${id} is not on the page`); continue; }
  if (action === 'click') { control.click(); continue; }
  control.value = String(value);
  control.dispatchEvent(new Event('input', {bubbles: true}));
  control.dispatchEvent(new Event('change', {bubbles: true}));
  if (Number(control.value) !== value) problems.push(`#${id} took ${control.value}, not ${value}`);
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


def set_group(browser, group):
    """Set G, the reward kind, the scaling, each answer's reward and length, through the controls."""
    steps = [("group-size", "set", group["G"]), (f"reward-kind-{group['kind']}", "click", None),
             (f"scale-{group['scale']}", "click", None)]
    for i, (reward, length) in enumerate(zip(group["rewards"], group["lengths"])):
        if group["kind"] == "binary":
            steps.append((f"{'right' if reward == 1 else 'wrong'}-{i}", "click", None))
        else:
            steps.append((f"reward-{i}", "set", reward))
        steps.append((f"length-{i}", "set", length))
    assert browser.execute_script(OPERATE_CONTROLS, steps) == []


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
        coefficients = aggregation_coefficients(mask, advantages, size, rule).double()
        weights = token_weights(mask, advantages, size, rule).double()
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
        numbers[("positive-share", rule, None)] = positive_share(mask, advantages, size, rule)
        # J = sum_it c_it l_it and l_it = -A_i at ratio 1 (docs/method.md §1, §3)
        numbers[("loss-at-ratio-one", rule, None)] = -(coefficients * advantages.double()[:, None]).sum().item()
    return numbers


def assert_page_equals_grpo_ba(page, expected, group):
    assert set(page) == set(expected), sorted(set(page) ^ set(expected), key=str)
    for key, want in expected.items():
        got = page[key]
        if want is None or got is None:
            assert got is None and want is None, (key, got, want, group)
        else:
            assert abs(got - want) <= TOLERANCE, (key, got, want, group)


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


# ------------------------------------------------------------------ the presets

def show_preset(browser, name):
    open_page(browser)
    assert browser.execute_script(OPERATE_CONTROLS, [(f"preset-{name}", "click", None)]) == []
    numbers, read = page_numbers(browser)
    lengths = [int(browser.find_element("id", f"length-{i}").get_attribute("value")) for i in range(read["groupSize"])]
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
    assert "drift" in read["headline"]


def test_devaluation_preset_has_sequence_shrink_the_tokens_of_one_long_right_answer(browser):
    numbers, read, lengths, right = show_preset(browser, "devaluation")
    right_answers = [i for i, is_right in enumerate(right) if is_right]
    long_one = max(right_answers, key=lengths.__getitem__)
    others = [i for i in right_answers if i != long_one]
    assert others and all(lengths[long_one] >= 4 * lengths[i] for i in others)   # one long right answer
    per_token = lambda rule, i: numbers[("token-weight", rule, i)]
    total = lambda rule, i: numbers[("total-weight", rule, i)]
    for i in others:
        # sequence: 1/L_i per token, so the long answer's tokens shrink and its total stays
        shrunk = per_token("sequence", i) * lengths[i] / lengths[long_one]
        assert per_token("sequence", long_one) == pytest.approx(shrunk)
        assert total("sequence", long_one) == pytest.approx(total("sequence", i))
        # balanced: one weight for every token of a sign
        assert per_token("balanced", long_one) == pytest.approx(per_token("balanced", i))
    assert f"answer {long_one + 1}" in read["headline"] and "less" in read["headline"]


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
  const box = e.getBoundingClientRect();
  return box.width > 0 && (box.right > width + 0.5 || box.left < -0.5);
}).map(e => e.tagName + (e.id ? '#' + e.id : ''));
return {scrollWidth: document.documentElement.scrollWidth, width, outside,
        bars: document.querySelectorAll('#chart-total rect[data-value]').length};
"""


@pytest.mark.parametrize("width, height", [(1280, 800), (390, 844)])
def test_screenshot_is_not_blank_and_nothing_overflows(browser, width, height, tmp_path):
    open_page(browser, width, height)
    browser.execute_script(OPERATE_CONTROLS, [("preset-coupling", "click", None)])
    layout = browser.execute_script(OVERFLOW)
    assert layout["scrollWidth"] <= layout["width"] and layout["outside"] == [], layout
    assert layout["bars"] == 3 * 8
    png = browser.get_screenshot_as_png()
    ink, colours, _ = screen_contents(png, width, height)
    assert ink > 0.03 and colours > 100, (ink, colours)               # the first screen is not blank
    (tmp_path / f"explore-{width}x{height}.png").write_bytes(png)
    if width == 1280 and os.environ.get("EXPLORE_SCREENSHOT"):
        pathlib.Path(os.environ["EXPLORE_SCREENSHOT"]).write_bytes(png)
    # on a phone the charts come below the controls: scrolled to, they are drawn
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
    assert "<script src" not in source and "@import" not in source and "url(" not in source
