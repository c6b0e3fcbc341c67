"""Regenerate the screenshots of docs/explore.html under assets/, in headless Chromium.

    python scripts/explore_screenshots.py            # writes the three PNGs below
    python scripts/explore_screenshots.py --out DIR  # elsewhere (to compare before committing)

assets/explore.png              1280x800, a projector: the coupling preset (the README's picture)
assets/explore-1024x768.png     1024x768, a small projector: the equal-weighting preset
assets/explore-390x844.png      390x844, a phone: the coupling preset scrolled to the length sliders,
                                with the shares kept in view at the top

Needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver) and
selenium (requirements/dev.txt), as tests/course/test_explore_page.py does.
"""
import argparse
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "explore.html"
SHOTS = (  # (file name, width, height, preset, what to scroll into view or None)
    ("explore.png", 1280, 800, "coupling", None),
    ("explore-1024x768.png", 1024, 768, "equal-weighting", None),
    ("explore-390x844.png", 390, 844, "coupling", "length-5"),
)


def chromium():
    """A headless Chromium at a device scale factor of 1, or exit with what to install."""
    missing = [name for name in ("chromium", "chromedriver") if not shutil.which(name)]
    if missing:
        sys.exit(f"no {', '.join(missing)}: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--disable-extensions", "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def shoot(browser, path, width, height, preset, scroll_to):
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
    browser.get(PAGE.as_uri())
    browser.execute_script("document.getElementById(arguments[0]).click()", f"preset-{preset}")
    if scroll_to:
        browser.execute_script("document.getElementById(arguments[0]).scrollIntoView({block: 'center'})", scroll_to)
    path.write_bytes(browser.get_screenshot_as_png())
    print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {width}x{height}, preset {preset}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "assets", help="folder to write into (assets/)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    browser = chromium()
    try:
        for name, width, height, preset, scroll_to in SHOTS:
            shoot(browser, args.out.resolve() / name, width, height, preset, scroll_to)
    finally:
        browser.quit()


if __name__ == "__main__":
    main()
