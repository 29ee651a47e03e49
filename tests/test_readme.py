"""The README's and the manual's promises, checked against the program: their spec snippets are
read by knoblab's own spec loader, their commands by the real argument parser, the paths they
name exist, the files they say knoblab writes are the ones the code writes, and their links
lead somewhere. A promise that drifts from the program turns this red.

Every page is checked: README.md and each page under docs/ but two folders, docs/reference/
(generated from the code itself) and docs/data/ (the benchmarks' raw data). Each check runs
per page, so a failure names the page. The benchmarks' commands of their own scripts pass
because only `knoblab …` lines are taken for knoblab's commands."""

from __future__ import annotations

import argparse
import copy
import gzip
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from knoblab import capturing
from knoblab.cli import build_parser
from knoblab.report import exporters
from knoblab.search.options import TuneOptions
from knoblab.search.space import parse_space
from knoblab.search.study import beside
from knoblab.spec import parse_spec
from knoblab.store import Store, default_url

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# Generated from the code when the manual is built: not checked here, only linked to.
REFERENCE = DOCS / "reference"
REFERENCE_PAGES = {"spec.md", "commands.md", "json.md"}
# The benchmarks' raw data, report.md files among them: knoblab's output kept as data (their
# charts not kept), not pages written to promise anything.
DATA = DOCS / "data"


def _fenced(text: str) -> tuple[list[tuple[str, str]], str]:
    """The fenced blocks (language, body) and the prose around them."""
    blocks: list[tuple[str, str]] = []
    prose: list[str] = []
    fence: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if fence is None and line.startswith("```"):
            fence, body = line[3:].strip(), []
        elif fence is not None and line.strip() == "```":
            blocks.append((fence, "\n".join(body) + "\n"))
            fence = None
        elif fence is not None:
            body.append(line)
        else:
            prose.append(line)
    assert fence is None, "a fenced block is never closed"
    return blocks, "\n".join(prose)


def _commands(text: str) -> list[str]:
    """Each `knoblab SUBCOMMAND …` in `text`, up to a comment."""
    found = []
    for line in text.splitlines():
        line = line.split("  #")[0].strip()
        if line.startswith("#"):
            continue
        match = re.match(r"(?:\.venv/bin/)?knoblab\s+((?:--store\s+\S+\s+)?[a-z]+(?:\s.*)?)$",
                         line)
        if match:
            found.append(match.group(1).strip())
    return found


@dataclass
class Page:
    """A page of the README or the manual, read once: its blocks, prose and commands."""

    name: str  # its path from the repository's root
    path: Path
    text: str
    blocks: list[tuple[str, str]] = field(default_factory=list)
    prose: str = ""

    def __post_init__(self) -> None:
        self.blocks, self.prose = _fenced(self.text)

    @property
    def toml_blocks(self) -> list[str]:
        return [body for lang, body in self.blocks if lang == "toml"]

    @property
    def command_blocks(self) -> list[str]:
        return [body for lang, body in self.blocks if lang == ""]

    @property
    def inline(self) -> list[str]:
        """Inline code outside the fenced blocks; a span may go on over a line break."""
        return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", self.prose)]

    @property
    def block_commands(self) -> list[str]:
        return [c for block in self.command_blocks for c in _commands(block)]

    @property
    def inline_commands(self) -> list[str]:
        return [c for span in self.inline for c in _commands(span)]


def _read(path: Path) -> Page:
    return Page(str(path.relative_to(ROOT)), path, path.read_text(encoding="utf-8"))


PAGES = [_read(ROOT / "README.md"),
         *(_read(p) for p in sorted(DOCS.rglob("*.md"))
           if REFERENCE not in p.parents and DATA not in p.parents)]
BY_NAME = {page.name: page for page in PAGES}
README = BY_NAME["README.md"]
TUNE_GUIDE = BY_NAME["docs/guides/tune.md"]
SWEEP_GUIDE = BY_NAME["docs/guides/sweep.md"]


def _each(items_of) -> list[Any]:
    """pytest params of (page, item) for every page, named by the page."""
    return [pytest.param(page, item, id=f"{page.name}:{_label(item)}")
            for page in PAGES for item in items_of(page)]


def _label(item: str) -> str:
    lines = item.strip().splitlines()
    return lines[0][:40] if lines else ""


ON_EVERY_PAGE = pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])


# --------------------------------------------------------------- the README's shape


def test_the_readme_is_at_most_300_lines():
    lines = README.text.count("\n")  # as wc -l counts them
    assert lines <= 300, f"the README has {lines} lines, more than 300"


def test_the_readme_opens_with_the_two_setup_commands():
    """Within its first 40 lines, one fenced block holds ./scripts/demo and ./scripts/test."""
    head = README.text.splitlines()[:40]
    opening = [i for i, line in enumerate(head) if line.startswith("```")]
    blocks = ["\n".join(head[a + 1:b]) for a, b in zip(opening[::2], opening[1::2], strict=False)]
    assert any(re.search(r"^\./scripts/demo\b", b, re.M) and re.search(r"^\./scripts/test\b", b,
                                                                         re.M) for b in blocks)


def test_every_page_under_docs_is_checked():
    """The pages the manual is made of (the reference apart) are all read here."""
    assert {"docs/index.md", "docs/how-sure.md", "docs/guides/sweep.md",
            "docs/guides/your-server.md"} <= set(BY_NAME)


# --------------------------------------------------------------- the words' paragraphs


def _anchor(kind: str, word: str) -> str:
    """The id a report links a word to: its kind, then the word, each run of other characters
    than letters and digits a '-' ("I/O-bound": regime-i-o-bound)."""
    return f"{kind}-{re.sub(r'[^a-z0-9]+', '-', word.lower()).strip('-')}"


def test_every_word_of_a_verdict_has_its_paragraph_in_how_sure():
    """Each verdict, finding, regime, stop reason and design has a heading or paragraph of
    its own on docs/how-sure.md, under the id the reports link to ({#point-best})."""
    from knoblab import vocabulary as v
    from knoblab.workloads.timed import regime

    regimes = {regime(cpu, iowait, io) for cpu in (0.0, 0.5, 0.9) for iowait in (0.0, 0.5)
               for io in (0.0, 1.0)}
    words = {"point": v.PointVerdict, "step": v.StepVerdict, "validation": v.ValidationVerdict,
             "class": v.ClassVerdict, "comparison": v.ComparisonVerdict, "finding": v.Finding,
             "stop": v.StopReason, "design": v.Design, "regime": regimes}
    ids = set(re.findall(r"\{:?\s*#([\w-]+)\s*\}", BY_NAME["docs/how-sure.md"].text))
    missing = sorted(_anchor(kind, str(word)) for kind, vocabulary in words.items()
                     for word in vocabulary if _anchor(kind, str(word)) not in ids)
    assert "regime-i-o-bound" in {_anchor("regime", r) for r in regimes}
    assert not missing, f"docs/how-sure.md has no paragraph for {missing}"


# --------------------------------------------------------------- spec snippets

# A fragment is completed with what a spec needs to be whole: a workload, its data, something
# to measure. What the fragment gives is never overridden.
QUERY = {"kind": "query", "sql": "SELECT COUNT(*) FROM dt2"}
SWEEP = {"read_buffer_size": ["64K", "128K"]}


def completed(fragment: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(fragment)
    spec.setdefault("workload", dict(QUERY))
    if spec["workload"].get("kind", "query") == "query" and "dataset" not in spec:
        spec["dataset"] = {} if "rows" in spec.get("sweep", {}) else {"rows": 1000}
    if not any(key in spec for key in ("sweep", "step", "tune")):
        spec["sweep"] = copy.deepcopy(SWEEP)
    return spec


def _files_named(spec: dict[str, Any], folder: Path) -> None:
    """The dump and the captured log a snippet names, made small beside the spec."""
    dump = (spec.get("dataset") or {}).get("dump")
    if dump:
        with gzip.open(folder / dump, "wt") as out:
            out.write("-- MariaDB dump\nCREATE DATABASE shop;\nUSE shop;\n"
                      "CREATE TABLE t (id INT PRIMARY KEY);\n")
    log = (spec.get("workload") or {}).get("log")
    if log:
        (folder / log).write_text(
            "# Time: 240101 10:00:00\n# User@Host: app[app] @ localhost []\n"
            "# Thread_id: 5  Schema: shop  QC_hit: No\n"
            "# Query_time: 0.001  Lock_time: 0.0  Rows_sent: 1  Rows_examined: 1\n"
            "SET timestamp=1704103200;\nSELECT id FROM t WHERE id = 1;\n")


def _load(block: str, folder: Path):
    """The spec as knoblab run (and knoblab tune, its [tune] section) reads it."""
    spec = completed(tomllib.loads(block))
    _files_named(spec, folder)
    loaded = parse_spec(spec, block, default_name="readme", base_dir=folder)
    if loaded.tune is not None:
        TuneOptions.from_spec(loaded.tune, loaded.name)
    return loaded


def test_the_manual_has_spec_snippets():
    assert sum(len(page.toml_blocks) for page in PAGES) >= 10


@pytest.mark.parametrize(("page", "block"), _each(lambda page: page.toml_blocks))
def test_every_spec_snippet_is_accepted_by_the_spec_loader(page, block, tmp_path):
    """Each section and key is one the loader takes (the function knoblab run uses)."""
    _load(block, tmp_path)


@pytest.mark.server
@pytest.mark.parametrize(("page", "block"), _each(lambda page: page.toml_blocks))
def test_every_setting_a_spec_snippet_names_is_the_servers(page, block, tmp_path, catalog):
    """The server settings in [server.config], [sweep], [[step]] and [tie], and their values,
    as a run checks them against the server's own catalog."""
    spec = _load(block, tmp_path)
    if not spec.searches:
        spec.points(catalog)
        return
    knobs = TuneOptions.from_spec(spec.tune or {}, spec.name).knobs
    if knobs != "auto":
        parse_space(knobs, catalog, spec.allow_durability_tradeoff)


# --------------------------------------------------------------- commands


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


PARSER = build_parser()
SUBCOMMANDS = _subparsers(PARSER)


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def _check_words(command: str) -> None:
    """The subcommand exists, each --flag is one of its own (or the global --store), and each
    listed choice (a|b|c) is one it takes."""
    words = command.replace("[", " ").replace("]", " ").split()
    if words[0] == "--store":
        words = words[2:]
    sub = SUBCOMMANDS.get(words[0])
    assert sub is not None, f"knoblab {words[0]}: no such command ({command!r})"
    options = {**_options(PARSER), **_options(sub)}
    for word, following in zip(words, [*words[1:], ""], strict=True):
        if not word.startswith("--"):
            continue
        flag = word.split("=")[0]
        assert flag in options, f"knoblab {words[0]} has no {flag} ({command!r})"
        action = options[flag]
        if action.choices is not None and following and not following.startswith("-"):
            for choice in following.split("|"):
                assert choice in action.choices, f"{flag} takes no {choice} ({command!r})"


def test_the_manual_has_commands():
    """Every command is shown in a block somewhere in the README or the manual."""
    shown = {c.split()[0] for page in PAGES for c in page.block_commands}
    assert shown >= {"run", "tune", "capture", "verify", "report", "compare", "runs", "resume",
                     "restore", "knobs"}


@pytest.mark.parametrize(("page", "command"),
                         _each(lambda page: page.block_commands + page.inline_commands))
def test_every_command_has_its_subcommand_and_flags(page, command):
    _check_words(command)


def _as_typed(command: str) -> list[str]:
    """A command block's line as a user would type it: optional parts in, the first of a|b."""
    words = [word.split("|")[0] for word in
             shlex.split(re.sub(r"[\[\]]", " ", command).replace("…", ""))]
    sub = SUBCOMMANDS.get(words[0], PARSER)
    options = {**_options(PARSER), **_options(sub)}
    for i, word in enumerate(words[:-1]):  # a placeholder of a number: a number
        action = options.get(word)
        if action is not None and action.type is int and words[i + 1].isupper():
            words[i + 1] = "1"
    return words


@pytest.mark.parametrize(("page", "command"), _each(lambda page: page.block_commands))
def test_every_command_line_parses(page, command):
    """Whole lines of the command blocks, positional arguments included, parse as written."""
    PARSER.parse_args(_as_typed(command))


# --------------------------------------------------------------- paths in the repository

PATH = re.compile(r"(?:(?<=\./)|(?<![\w./~$-]))((?:examples|scripts|docs|knoblab|tests|benchmarks)/"
                  r"[\w/-]*(?:\.[\w-]+)*)")


def _made_by_the_pages_scripts(page: Page) -> set[str]:
    """Files a command block makes with the project's own scripts (a dump, a captured log)."""
    made = set()
    for block in page.command_blocks:
        for line in block.splitlines():
            words = line.split()
            for i, word in enumerate(words):
                if word.startswith("scripts/") and (ROOT / word).is_file():
                    made |= {w for w in words[i + 1:] if not w.startswith("-")}
    return made


def _named_paths(text: str) -> set[str]:
    """The repository's paths a text names; one followed by `*` is a pattern (`shape-*.txt`)."""
    named = set()
    for match in PATH.finditer(text):
        pattern = re.match(r"\*[\w.*/-]*", text[match.end():])
        named.add(match.group(1) + (pattern.group(0).rstrip(".") if pattern else ""))
    return named


def _generated(path: Path) -> bool:
    """A page of the reference the manual's build generates."""
    return path.parent == REFERENCE and path.name in REFERENCE_PAGES


def _in_the_repository(name: str) -> bool:
    if "*" in name:
        return any(ROOT.glob(name))
    return (ROOT / name).exists() or _generated(ROOT / name)


def test_the_readme_names_the_first_example():
    assert "examples/read-buffer-scan.toml" in _named_paths(README.text)


@ON_EVERY_PAGE
def test_every_path_a_page_names_exists(page):
    made = _made_by_the_pages_scripts(page)
    missing = sorted(p for p in _named_paths(page.text)
                     if p not in made and not _in_the_repository(p))
    assert not missing, f"{page.name} names paths the repository lacks: {missing}"


# --------------------------------------------------------------- links


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HTML_LINK = re.compile(r"\b(?:href|src)=\"([^\"]+)\"")


def _links(page: Page) -> list[str]:
    """The targets of a page's links and images, outside code (fenced or inline)."""
    prose = re.sub(r"`[^`]*`", "code", page.prose)
    return [*LINK.findall(prose), *REFERENCE_LINK.findall(prose), *HTML_LINK.findall(prose)]


def _leads_somewhere(page: Page, target: str) -> bool:
    """A relative link's file exists (its anchor is not checked); a link to a page of the
    generated reference names one the build generates."""
    if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
        return True  # an address elsewhere, or an anchor of this page
    path = (page.path.parent / target.split("#")[0].split("?")[0]).resolve()
    return path.exists() or _generated(path)


def test_the_readme_links_to_the_manual():
    targets = set(_links(README))
    assert {"docs/index.md", "docs/how-sure.md", "docs/guides/your-server.md"} <= targets


@ON_EVERY_PAGE
def test_every_relative_link_leads_to_a_file(page):
    broken = sorted(t for t in _links(page) if not _leads_somewhere(page, t))
    assert not broken, f"{page.name} links to files that do not exist: {broken}"


# --------------------------------------------------------------- files knoblab writes


def _study_file(tmp_path: Path) -> str:
    store = Store(default_url(tmp_path))
    return Path(beside(store).removeprefix("sqlite:///")).name


def _study_file_beside(tmp_path: Path, stem: str) -> str:
    folder = tmp_path / stem
    folder.mkdir()
    store = Store(f"sqlite:///{folder / stem}.sqlite")
    return Path(beside(store).removeprefix("sqlite:///")).name


def _png_written(name: str) -> bool:
    stem = re.escape(name.removesuffix(".png"))
    source = "\n".join(p.read_text() for p in (ROOT / "knoblab" / "report").glob("*.py"))
    return re.search(rf"[\"']{stem}(\{{[^}}]*\}})?\.png[\"']", source) is not None


# Names the pages give to files the user makes or names, not knoblab's outputs.
USERS_FILES = {"prod.toml", "my.cnf"}
FILE = re.compile(r"^(\w[\w.-]*\.(?:html|md|csv|cnf|json|png|sqlite|log|zst))$")


def _files_named_in(page: Page) -> set[str]:
    return {n for span in page.inline for n in FILE.findall(span)}


@pytest.mark.parametrize("page", [README, SWEEP_GUIDE], ids=lambda p: p.name)
def test_the_report_files_are_named(page):
    assert {"report.html", "recommended.cnf", "result.json", "measurements.csv"} \
        <= _files_named_in(page)


@ON_EVERY_PAGE
def test_every_file_a_page_says_knoblab_writes_is_one_it_writes(page, tmp_path):
    store_file = Path(default_url(tmp_path).removeprefix("sqlite:///")).name
    study_file = _study_file(tmp_path)
    written = {*exporters.file_names(), capturing.LOG, capturing.DUMP, capturing.SPEC,
               capturing.SUMMARY, store_file, study_file}
    # the benchmarks' raw data, named by the pages that quote it
    named = _files_named_in(page) - {p.name for p in DATA.iterdir()}
    # a study's file beside a store the page names
    written |= {_study_file_beside(tmp_path, n.removesuffix("-tune.sqlite"))
                for n in named if n.endswith("-tune.sqlite")}
    unknown = sorted(n for n in named - written - USERS_FILES
                     if not (n.endswith(".png") and _png_written(n)))
    assert not unknown, f"{page.name} names files knoblab does not write: {unknown}"


def test_the_tune_guide_names_the_study_file_the_code_writes(tmp_path):
    study_file = _study_file(tmp_path)
    assert study_file == "knoblab-tune.sqlite"
    assert f"`{study_file}`" in TUNE_GUIDE.text
    assert f"`{_study_file_beside(tmp_path, 'runs')}`" in TUNE_GUIDE.text


def test_the_tune_guide_names_the_default_report_folders():
    from knoblab.studies import report_folder

    assert f"`{report_folder('NAME')}/`" in TUNE_GUIDE.text


# --------------------------------------------------------------- what the scripts install


def _installed_by_setup() -> set[str]:
    return set(re.findall(r"missing\+=\(([\w.-]+)\)", (ROOT / "scripts" / "setup").read_text()))


def test_the_readme_says_what_setup_installs():
    packages = _installed_by_setup()
    assert {"mariadb-server", "chromium", "chromium-driver"} <= packages
    unsaid = sorted(p for p in packages if f"`{p}`" not in README.text)
    assert not unsaid, f"scripts/setup installs {unsaid}, which the README does not say"


def _setup_packages() -> tuple[set[str], set[str]]:
    """What scripts/setup installs: always, and with --browser (its `if` block); the packages
    it adds to `missing` by name or through a `for` loop over names."""
    always: set[str] = set()
    browser: set[str] = set()
    into = always
    for line in (ROOT / "scripts" / "setup").read_text().splitlines():
        if line.startswith('if [ "${1:-}" = "--browser" ]'):
            into = browser
        elif line == "fi":
            into = always
        into.update(re.findall(r"missing\+=\(([\w.-]+)\)", line))
        if loop := re.match(r"\s*for library in ([\w. -]+);", line):
            into.update(loop.group(1).split())
    return always, browser


def _named_between(text: str, start: str, end: str) -> set[str]:
    """The names in backquotes between `start` and `end`, asides in parentheses left out."""
    span = text[text.index(start):]
    span = span[:span.index(end)]
    return set(re.findall(r"`([^`]+)`", re.sub(r"\([^()]*\)", "", span)))


def test_the_readme_names_exactly_what_setup_installs():
    """No package the script does not install (a build chain for a client that is gone), none
    it installs left out; for the plain set-up and for --browser alike."""
    always, browser = _setup_packages()
    text = README.text
    section = " ".join(text[text.index("## Set-up"):text.index("## Use")].split())
    assert _named_between(section, "which installs from Debian", "a virtualenv") == always
    assert _named_between(section, "which also installs", "and unpacks") == browser


def test_the_readme_says_scripts_test_installs_the_browser_and_why():
    assert "setup --browser" in (ROOT / "scripts" / "test").read_text()
    text = README.text
    section = text[text.index("## Set-up"):text.index("## Use")]
    assert "`./scripts/test` runs it with `--browser`" in section
    assert "Chromium to check how they render" in section


# --------------------------------------------------------------- sections the prose names


def _a_section_knoblab_reads(name: str) -> bool:
    """`[a]`, `[[a]]` or `[a.b]`: a table a spec may hold, by the keys its readers take."""
    from knoblab.search.options import KEYS as TUNE_KEYS
    from knoblab.spec import SECTION_KEYS, TOP_KEYS
    from knoblab.workloads.sysbench import SysbenchWorkload

    head, _, sub = name.strip("[]").partition(".")
    tables = {"server": SECTION_KEYS["server"], "tune": TUNE_KEYS,
              "workload": SysbenchWorkload.keys}
    return head in TOP_KEYS and (not sub or sub in tables.get(head, set()))


def test_the_readme_names_the_base_configuration_section():
    named = {m for span in README.inline for m in re.findall(r"^\[\[?[a-z_.]+\]\]?", span)}
    assert "[server.config]" in named


@ON_EVERY_PAGE
def test_every_section_a_page_names_is_one_a_spec_has(page):
    named = {m for span in page.inline for m in re.findall(r"^\[\[?[a-z_.]+\]\]?", span)}
    named.discard("[mysqld]")  # recommended.cnf's section, of the server's option file
    unknown = sorted(n for n in named if not _a_section_knoblab_reads(n))
    assert not unknown, f"{page.name} names sections no spec has: {unknown}"
