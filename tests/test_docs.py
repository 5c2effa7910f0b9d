"""README.md and docs/*.md stay readable: the README short, every table whole (each row as many
cells as its header, no rows cut off by a blank line), every relative link pointing at a file."""

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
MAX_README_LINES = 300


def _parse(text):
    return MarkdownIt("commonmark").enable("table").parse(text)


def _cells(row):
    """A table row's cells as markdown-it splits them: on `|` not escaped by a backslash, with
    the empty pieces before a leading and after a trailing `|` dropped."""
    cells = re.split(r"(?<!\\)\|", row.strip())
    if cells and cells[0] == "":
        cells.pop(0)
    if cells and cells[-1] == "":
        cells.pop()
    return cells


def table_problems(text):
    """What is wrong with the tables of a Markdown text, one line each ("line N: ...", 1-based):
    a row whose cell count differs from its header's (markdown-it pads or cuts such a row
    silently), and a line starting with `|` outside every parsed table and code block (a row cut
    off from its table by a blank line renders as plain text)."""
    lines = text.splitlines()
    problems = []
    covered = set()  # lines inside tables and code blocks
    header = None
    for token in _parse(text):
        if token.type in ("fence", "code_block", "html_block") and token.map:
            covered.update(range(*token.map))
        elif token.type == "table_open":
            covered.update(range(*token.map))
            header = None
        elif token.type == "tr_open":
            row = token.map[0]
            count = len(_cells(lines[row]))
            if header is None:
                header = count
            elif count != header:
                problems.append(f"line {row + 1}: {count} cells, the header has {header}")
    for number, line in enumerate(lines):
        if line.lstrip().startswith("|") and number not in covered:
            problems.append(f"line {number + 1}: a table row outside any table")
    return problems


def relative_link_targets(text):
    """The targets of the text's links and images that are neither URLs nor #anchors, without
    their #fragment."""
    targets = []
    for token in _parse(text):
        for child in token.children or ():
            target = child.attrs.get("href") if child.type == "link_open" else None
            if child.type == "image":
                target = child.attrs.get("src")
            if not target or target.startswith("#") or re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue
            targets.append(unquote(target.split("#", 1)[0]))
    return targets


def _name(path):
    return str(path.relative_to(ROOT))


def test_readme_has_at_most_300_lines():
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_table_row_has_as_many_cells_as_its_header_and_no_row_is_cut_off(page):
    assert table_problems(page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_points_at_an_existing_file(page):
    targets = relative_link_targets(page.read_text(encoding="utf-8"))
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert missing == [], f"{_name(page)} links to missing {missing}"


def test_docs_pages_start_with_a_title_and_a_link_back_to_the_readme():
    assert DOCS, "docs/ has no pages"
    for page in DOCS:
        first, _, link = page.read_text(encoding="utf-8").splitlines()[:3]
        assert first.startswith("# "), f"{_name(page)} does not start with a level-1 title"
        assert "(../README.md)" in link, f"{_name(page)} has no link back to the README"


def test_readme_documentation_list_links_every_docs_page():
    linked = set(relative_link_targets(README.read_text(encoding="utf-8")))
    unlinked = [_name(page) for page in DOCS if _name(page) not in linked]
    assert unlinked == [], f"README.md does not link {unlinked}"


BROKEN = """\
# A page

| a | b |
|---|---|
| 1 | 2 |
| 3 | 4 | 5 |
| 6 |

| 7 | 8 |
| 9 | 10 |

| escaped \\| pipe | c |
|---|---|
| `x \\| y` | z |

```
| inside a code block |
```
"""


def test_a_broken_table_in_a_file_is_caught(tmp_path):
    page = tmp_path / "broken.md"
    page.write_text(BROKEN, encoding="utf-8")
    assert table_problems(page.read_text(encoding="utf-8")) == [
        "line 6: 3 cells, the header has 2",
        "line 7: 1 cells, the header has 2",
        "line 9: a table row outside any table",
        "line 10: a table row outside any table",
    ]


def test_a_missing_link_target_is_caught(tmp_path):
    text = "[here](here.md) [gone](gone.md#part) [web](https://x.org/a.md) [up](#top) ![i](img.png)"
    (tmp_path / "here.md").write_text("# here\n", encoding="utf-8")
    targets = relative_link_targets(text)
    assert targets == ["here.md", "gone.md", "img.png"]
    assert [t for t in targets if not (tmp_path / t).exists()] == ["gone.md", "img.png"]
