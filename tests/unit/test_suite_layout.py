"""The suite's own layout: what pytest's default import mode needs to collect every test.

tests/ has no __init__.py files, so pytest imports each test module by its basename; two modules
with one basename in different folders stop the whole run at collection ("import file mismatch")
only when both folders are collected together, as the README's test command does.
"""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    shared = sorted(name for name, count in names.items() if count > 1)
    assert not shared, f"test modules sharing a basename (rename one): {shared}"
