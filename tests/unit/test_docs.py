"""The README and docs/ stay true to the repository: every link, deploy, switch and profile setting they name
exists (tests/support_docs.py says what each check reads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rigforge.context import RUN_SWITCHES
from rigforge.profile.json_schema import SCHEMA_FILE
from tests.support_docs import Repository, check_page, doc_pages, has_setting

ROOT = Path(__file__).resolve().parents[2]
REPO = Repository(ROOT, frozenset(RUN_SWITCHES), json.loads(SCHEMA_FILE.read_text()))


@pytest.mark.parametrize("page", doc_pages(ROOT), ids=lambda page: page.relative_to(ROOT).as_posix())
def test_page_names_only_what_exists(page: Path) -> None:
    problems = check_page(page, page.read_text(), REPO)
    assert not problems, "\n".join(problems)


def test_docs_pages_are_found() -> None:
    pages = [page.relative_to(ROOT).as_posix() for page in doc_pages(ROOT)]
    assert pages[0] == "README.md" and "docs/settings.md" in pages


# --- the checks themselves: a page broken on purpose (a fixture for the checker, not a real page) -------------

PAGE = ROOT / "docs" / "broken-on-purpose.md"

BROKEN = [
    # (a line of a page, what its one problem must say)
    ("See [the recipes](recipes.md) and [the settings](settings.md#engine).", None),
    ("See [nothing](no-such-page.md).", "docs/broken-on-purpose.md:3: link no-such-page.md: no such file "
                                        "docs/no-such-page.md"),
    ("See [the engine](settings.md#no-such-section).", "link settings.md#no-such-section: docs/settings.md has no "
                                                       "heading #no-such-section"),
    ("Back to [the top](#a-page-broken-on-purpose); [down](#nowhere).", "link #nowhere: "
                                                                        "docs/broken-on-purpose.md has no heading"),
    ("[images](../templates/images/) and ![a plot](../nope.png)", "link ../nope.png: no such file nope.png"),
    ("Run `pyinfra inventory/rig2x.py deploys/full.py`, then deploys/nope.py.", "deploys/nope.py: no such deploy"),
    ("`pyinfra inventory/rig2x.py deploys/serve.py --data recipe=marlin`", None),
    ("`pyinfra inventory/rig2x.py deploys/serve.py --data recipie=marlin`", "--data recipie=: not a switch "
                                                                            "rigforge accepts"),
    ("Switches, given as `--data key=value`: `allow_reboot=false`.", None),
    ("Set `engine.recipes`, `bench.floors[].concurrency`, `engine.flags.--tp-size`, `bench.py`.", None),
    ("Set `engine.recipes.<name>.claims[].metric` and `engine.auth.mode`.", None),
    ("Set `engine.recipies` to a mapping.", "`engine.recipies`: no such profile setting"),
    ("Set `engine.port.number`.", "`engine.port.number`: no such profile setting"),
    ("Set `engine.flags.tp-size`: flags start with --.", "`engine.flags.tp-size`: no such profile setting"),
]


@pytest.mark.parametrize(("line", "problem"), BROKEN, ids=[line for line, _ in BROKEN])
def test_the_checker_finds_a_broken_line(line: str, problem: str | None) -> None:
    text = f"# A page broken on purpose\n\n{line}\n\n```\n# not a heading: [x](in-a-code-block.md)\n```\n"
    problems = check_page(PAGE, text, REPO)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith("docs/broken-on-purpose.md:3: "), problems
        assert problem in problems[0], problems


def test_a_code_block_still_names_deploys_and_switches() -> None:
    text = "# Commands\n\n```\npyinfra inventory/rig2x.py deploys/nope.py --data bech=false\n```\n"
    assert check_page(PAGE, text, REPO) == [
        "docs/broken-on-purpose.md:4: deploys/nope.py: no such deploy",
        "docs/broken-on-purpose.md:4: --data bech=: not a switch rigforge accepts "
        f"({', '.join(sorted(RUN_SWITCHES))})",
    ]


@pytest.mark.parametrize("name", ["engine.recipes", "bench.floors", "driver_update.drain_command",
                                  "modprobe.options.nvidia_uvm.uvm_disable_hmm", "engine.docker.volumes./srv/x"])
def test_settings_the_docs_name_are_in_the_schema(name: str) -> None:
    assert has_setting(REPO.schema, name.split("."))
