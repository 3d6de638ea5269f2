"""The repository's documents stand on their own.

- No tracked text file points at a document outside the repository (the briefs the project
  started from, or a path on one machine).
- Every compliance rule id cited in the code, the tests and the docs (D1-D10 before dialing,
  C1-C13 during the call) is defined in docs/compliance.md, and every one of them is.
- The README's "Layout" section names only paths that exist.

Each check lists every offending ``file:line`` at once, so one run says what to fix.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()
COMPLIANCE = "docs/compliance.md"

#: Documents outside the repository, and paths that exist on one machine only.
OUTSIDE = re.compile(r"\bDOMAIN\b|DESIGN\.md|MODELS\.md|\.\./shared|/work/")

#: A rule id as cited: "D7", "C13", "C5-C7", "C8/C12", "D1..D10"; not part of a word,
#: a number or a URL escape ("%C2"), and never with a leading zero.
RULE_ID = re.compile(r"(?<![\w%])([CD][1-9][0-9]?)(?![\w%])")
#: Lines where "C0"/"C1" are Unicode's control-character sets, not rules.
NOT_RULES = re.compile(r"\bC0\b|control characters?|\bNEL\b")
#: The ids the rules define: D1-D10 before dialing, C1-C13 during the call.
EXPECTED_IDS = frozenset({f"D{n}" for n in range(1, 11)} | {f"C{n}" for n in range(1, 14)})
#: Where rule ids are cited.
CITING = ("agent/", "telephony/", "docs/", "tests/")


@cache
def tracked_text_files() -> tuple[tuple[str, str], ...]:
    """(path, text) of every tracked text file but test data and this file."""
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    files = []
    for raw in names:
        name = raw.decode()
        if not name or name.startswith("tests/data/") or name == THIS:
            continue
        path = ROOT / name
        if not path.is_file():  # deleted in the work tree, not yet in the index
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        try:
            files.append((name, data.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return tuple(files)


def outside_references(files: tuple[tuple[str, str], ...]) -> list[str]:
    return [
        f"{name}:{number}: {match.group()!r} in {line.strip()!r}"
        for name, text in files
        for number, line in enumerate(text.splitlines(), 1)
        for match in OUTSIDE.finditer(line)
    ]


def test_no_file_refers_to_documents_outside_the_repository() -> None:
    found = outside_references(tracked_text_files())
    assert not found, (
        "these lines point outside the repository; say the thing here, or point at our own "
        "docs (rules: docs/compliance.md):\n" + "\n".join(found)
    )


def defined_rules(text: str) -> dict[str, list[tuple[int, str]]]:
    """Each id of the tables headed ``| id | rule |``, with the line and rule text of each row."""
    defined: dict[str, list[tuple[int, str]]] = {}
    in_table = False
    for number, line in enumerate(text.splitlines(), 1):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|"):
            in_table = False
        elif cells[:2] == ["id", "rule"]:
            in_table = True
        elif in_table and not set(cells[0]) <= set("-: "):
            defined.setdefault(cells[0], []).append((number, cells[1] if len(cells) > 1 else ""))
    return defined


def cited_rules(files: tuple[tuple[str, str], ...]) -> dict[str, list[str]]:
    """Each rule id cited in agent/, telephony/, docs/, tests/, with where."""
    cited: dict[str, list[str]] = {}
    for name, text in files:
        if not name.startswith(CITING):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if NOT_RULES.search(line):
                continue
            for match in RULE_ID.finditer(line):
                cited.setdefault(match.group(1), []).append(f"{name}:{number}")
    return cited


def test_compliance_md_defines_each_rule_once_with_its_text() -> None:
    defined = defined_rules((ROOT / COMPLIANCE).read_text(encoding="utf-8"))
    problems = [
        f"{rule}: no row in a `| id | rule |` table" for rule in sorted(EXPECTED_IDS - set(defined))
    ]
    for rule, rows in sorted(defined.items()):
        where = ", ".join(f"{COMPLIANCE}:{line}" for line, _ in rows)
        if rule not in EXPECTED_IDS:
            problems.append(f"{where}: {rule!r} is not a rule id (expected D1-D10, C1-C13)")
        if len(rows) > 1:
            problems.append(f"{where}: {rule} is defined {len(rows)} times")
        problems += [f"{COMPLIANCE}:{line}: {rule} has no rule text" for line, t in rows if not t]
    assert not problems, "\n".join(problems)


def test_every_rule_id_cited_is_defined_in_compliance_md() -> None:
    defined = set(defined_rules((ROOT / COMPLIANCE).read_text(encoding="utf-8")))
    cited = cited_rules(tracked_text_files())
    undefined = {rule: where for rule, where in cited.items() if rule not in defined}
    assert not undefined, f"rule ids cited but not defined in {COMPLIANCE}:\n" + "\n".join(
        f"{rule}: {', '.join(where[:10])}{' ...' if len(where) > 10 else ''}"
        for rule, where in sorted(undefined.items())
    )


def test_rule_ids_are_found_where_they_are_cited() -> None:
    """The scan itself: ids in ranges and lists count, control characters and escapes don't."""
    files = (
        ("docs/x.md", "D1-D10 and C5-C7, C8/C12 (D1..D3)\n"),
        ("agent/x.py", "# C0 and C1 controls\nq=%C2%85 0xD1 AC3 test_c3 C13s\n"),
        ("README.md", "C4\n"),
    )
    assert {rule: len(where) for rule, where in cited_rules(files).items()} == {
        "D1": 2,
        "D10": 1,
        "C5": 1,
        "C7": 1,
        "C8": 1,
        "C12": 1,
        "D3": 1,
    }


def layout_paths(readme: str) -> list[tuple[int, str]]:
    """(line, repository path) of each path the README's "Layout" section names.

    A bullet starts with its directory (`agent/`); a file named in it without a
    directory of ours in front (`call.py`, `web/`) is in that directory."""
    lines = readme.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "## Layout")
    top_level = {p.name for p in ROOT.iterdir()}
    paths = []
    base = ""
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("## "):
            break
        names = re.findall(r"`([^`\s]+)`", line)
        if line.startswith("- ") and names and line.startswith(f"- `{names[0]}`"):
            base = names[0] if names[0].endswith("/") else ""
        for name in names:
            if not re.fullmatch(r"[\w.-]+(/[\w.-]+)*/?", name) or not (
                name.endswith("/") or re.search(r"\.\w+$", name)
            ):
                continue  # a command or a word, not a path
            rooted = name.split("/")[0] in top_level and (
                "/" in name.rstrip("/") or name == base or not base
            )
            paths.append((number, name if rooted else base + name))
    return paths


def missing_layout_paths(readme: str, tracked: set[str]) -> list[str]:
    dirs = {
        "/".join(name.split("/")[: i + 1]) + "/" for name in tracked for i in range(name.count("/"))
    }
    return [
        f"README.md:{line}: `{path}` does not exist"
        for line, path in layout_paths(readme)
        if path.rstrip("/") not in tracked and path.rstrip("/") + "/" not in dirs
    ]


def test_the_readme_layout_names_only_paths_that_exist() -> None:
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    tracked = {n.decode() for n in names if n and (ROOT / n.decode()).exists()}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert layout_paths(readme), "README.md has no paths under '## Layout'"
    missing = missing_layout_paths(readme, tracked)
    assert not missing, "\n".join(missing)
