"""The log lines known failures show in: the kernel log since boot, the engine's journal since its start, and
the smoke bench's own failure lines since the engine's start.

One command, bounded output: each whole window is filtered on the rig with ``grep -F`` on the signatures'
needles (inventory/known-failures.yaml) and the words every error-level line holds
(``rigforge.known_failures.match.ERROR_WORDS``), and only those candidate lines come back, bounded
(``candidate_filter``): of the lines holding a needle, the first ``NEEDLE_HEAD`` of each needle, then each message
of that needle not sent yet (digits and hex numbers aside: a timestamp or a pid makes no new message), up to
``NEEDLE_DISTINCT`` more; of the lines holding only an error word, the first ``HEAD_LINES`` and last
``TAIL_LINES``. A failure at the window's start is not crowded out by a chatty log after it, nor one needle's
lines by another's or by error words, nor a failure by a harmless line of its own needle repeated: its line is
a new message. A count past ``NEEDLE_HEAD`` counts each message once. A kernel log of 10,000 lines on a healthy
rig sends a handful.

The kernel log is journald's entries with ``SYSLOG_IDENTIFIER=kernel`` (what ``journalctl -k`` shows,
read through the identifier so a host without a kernel of its own can be given lines: the e2e stand-in),
or ``dmesg`` where there is no journal (the lent GPU machine). The engine's journal is that of the
unit's current invocation (``InvocationID``): since its last start. The bench's lines are what its client sends
to syslog when a check fails (``SYSLOG_IDENTIFIER=rigforge-bench``), from the engine's last start on: a bench
that failed before the engine was restarted (with a fix) says nothing about the engine serving now.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.reads.parsing import split_sections

#: Candidate lines a log sends at most (each cut at LINE_CHARS): of those holding a needle, the first NEEDLE_HEAD
#: of each needle and then NEEDLE_DISTINCT messages it has not sent; of those holding only an error word, the
#: first HEAD_LINES and the last TAIL_LINES.
NEEDLE_HEAD = 200
NEEDLE_DISTINCT = 1000
HEAD_LINES = 500
TAIL_LINES = 1500
LINE_CHARS = 2000
#: The bounded streams, in one awk pass over the candidate lines (the needles come in RF_NEEDLES, one a line): a
#: line counts for the first needle it holds; its message is the line without its numbers. RF_GATE, every needle
#: as one regular expression, spares the lines that hold only an error word the test of each needle in turn.
_SPLIT = ('BEGIN{k=split(ENVIRON["RF_NEEDLES"],n,"\\n")}'
          '{hit=0;if($0~ENVIRON["RF_GATE"])for(i=1;i<=k;i++)if(n[i]!=""&&index($0,n[i])){hit=i;break}'
          'if(hit){key=$0;gsub(/0x[0-9a-fA-F]+|[0-9]+/,"",key);c[hit]++;'
          'if(c[hit]<=sh){seen[hit,key]=1;print}else if(!((hit,key) in seen)){seen[hit,key]=1;if(++d[hit]<=sd)print}'
          'next}'
          'e++;if(e<=eh)print;else eb[e%et]=$0}'
          'END{for(i=(e-et>eh?e-et+1:eh+1);i<=e;i++)print eb[i%et]}')
KERNEL_SECTION = "kernel"
ENGINE_SECTION = "engine"
BENCH_SECTION = "bench"
#: The bench client's syslog identifier (``rigforge.bench.__main__.SYSLOG_IDENT``).
BENCH_IDENT = "rigforge-bench"
#: What ``--since`` may be: journalctl's absolute times and relative offsets (`2026-11-24 03:00`, `-2h`, `today`).
SINCE = re.compile(r"^[A-Za-z0-9 :+.-]{1,40}$")


@dataclass(frozen=True)
class FailureLogs:
    """Lines of the kernel log and the engine journal that hold a known-failure needle, oldest first.

    + kernel: kernel log lines (since boot, or since the window asked for)
    + engine: engine journal lines (since its last start, or since the window)
    + bench: the bench's failure lines (since the engine's last start, or since the window)
    """

    kernel: tuple[str, ...]
    engine: tuple[str, ...]
    bench: tuple[str, ...] = ()


NO_LOGS = FailureLogs((), ())


def parse_failure_logs(text: str) -> FailureLogs:
    """Parse the fact's output: a ``## kernel``, an ``## engine`` and a ``## bench`` section of log lines.

    A missing section means the command did not run as written: an error naming the fact.
    """
    sections = split_sections(text)
    missing = [name for name in (KERNEL_SECTION, ENGINE_SECTION, BENCH_SECTION) if name not in sections]
    if missing:
        raise ValueError(f"KnownFailureLogs: no '## {missing[0]}' section in its output")

    def lines(name: str) -> tuple[str, ...]:
        return tuple(line for line in sections[name].splitlines() if line.strip())

    return FailureLogs(lines(KERNEL_SECTION), lines(ENGINE_SECTION), lines(BENCH_SECTION))


def grep_needles(needles: list[str], words: tuple[str, ...] | list[str] = ()) -> str:
    """``grep -aF`` on the needles and the error words, each line cut, then ``candidate_filter`` (nothing when
    there is neither).

    + needles: the signatures' fixed strings
    + words: the fixed strings every error-level line holds

    >>> grep_needles([])
    'cat >/dev/null'
    """
    wanted = list(dict.fromkeys([*needles, *words]))
    if not wanted:
        return "cat >/dev/null"
    options = " ".join(f"-e {shlex.quote(word)}" for word in wanted)
    return f"grep -aF {options} | cut -c1-{LINE_CHARS} | {candidate_filter(needles)}"


def candidate_filter(needles: list[str]) -> str:
    """An awk filter that keeps, in one pass, the first lines of each needle and then each new message of it and,
    apart, the first and last lines holding no needle (an error word only): each bounded on its own.

    + needles: the lines holding one of these are the signature stream (RF_NEEDLES, one a line)
    """
    unique = list(dict.fromkeys(needles))
    listed = shlex.quote("\n".join(unique))
    gate = shlex.quote("|".join(re.sub(r"([\\^$.\[\]|()*+?{}])", r"\\\1", needle) for needle in unique) or "^$x")
    bounds = f"-v sh={NEEDLE_HEAD} -v sd={NEEDLE_DISTINCT} -v eh={HEAD_LINES} -v et={TAIL_LINES}"
    return f"RF_NEEDLES={listed} RF_GATE={gate} awk {bounds} '{_SPLIT}'"


def failure_logs_command(unit: str, since: str | None, kernel_needles: list[str], engine_needles: list[str],
                         bench_needles: list[str] | None = None,
                         error_words: dict[str, tuple[str, ...]] | None = None) -> str:
    """The fact's shell command (see the module docstring).

    + unit: the engine's systemd unit
    + since: journalctl ``--since`` value, or None for since boot / since the engine's last start
    + kernel_needles, engine_needles, bench_needles: fixed strings a line must hold to be sent
    + error_words: the words error-level lines hold, by log (``kernel``, ``engine``): those lines are sent too
    """
    journal = "journalctl --no-pager -q -o short-iso"
    words = error_words or {}
    quoted_unit = shlex.quote(unit)
    if since is None:
        kernel_window, engine_match = "-b", '_SYSTEMD_INVOCATION_ID="$id"'
        engine_guard = f'id=$(systemctl show -p InvocationID --value {quoted_unit} 2>/dev/null); [ -n "$id" ] &&'
        bench_window = '--since "@$(date -d "$t" +%s)"'
        bench_guard = f't=$(systemctl show -p ActiveEnterTimestamp --value {quoted_unit} 2>/dev/null); [ -n "$t" ] &&'
    else:
        kernel_window = f"--since {shlex.quote(since)}"
        engine_match, engine_guard = f"-u {quoted_unit} --since {shlex.quote(since)}", ""
        bench_window, bench_guard = f"--since {shlex.quote(since)}", ""
    return (
        f"echo '## {KERNEL_SECTION}'; "
        f"{{ {journal} {kernel_window} SYSLOG_IDENTIFIER=kernel 2>/dev/null || dmesg 2>/dev/null; }} "
        f"| {grep_needles(kernel_needles, words.get(KERNEL_SECTION, ()))}; "
        f"echo '## {ENGINE_SECTION}'; "
        f"{engine_guard} {journal} {engine_match} 2>/dev/null "
        f"| {grep_needles(engine_needles, words.get(ENGINE_SECTION, ()))}; "
        f"echo '## {BENCH_SECTION}'; "
        f"{bench_guard} {journal} {bench_window} SYSLOG_IDENTIFIER={BENCH_IDENT} 2>/dev/null "
        f"| {grep_needles(bench_needles or [])}; true"
    )


class KnownFailureLogs(FactBase[FailureLogs]):
    """
    Returns the ``FailureLogs`` of the rig: the lines a known failure could show in, bounded.

    .. code:: python

        logs = host.get_fact(KnownFailureLogs)                 # since boot / the engine's last start
        logs = host.get_fact(KnownFailureLogs, since="-2h")    # a window (the doctor's --since)
    """

    def command(self, since: str | None = None) -> str:
        from rigforge.known_failures import needles
        from rigforge.known_failures.match import ERROR_WORDS
        from rigforge.serving.engines import UNIT_NAME

        if since is not None and not SINCE.match(since):
            raise ValueError(f"KnownFailureLogs: since {since!r} is not a journalctl time (e.g. -2h, 2026-11-24 03:00)")
        engine = list(dict.fromkeys(needles("engine") + needles("startup")))
        return failure_logs_command(UNIT_NAME, since, needles("kernel"), engine, needles("bench"), ERROR_WORDS)

    @staticmethod
    def default() -> FailureLogs:
        return NO_LOGS

    def process(self, output: list[str]) -> FailureLogs:
        return parse_failure_logs("\n".join(output))
