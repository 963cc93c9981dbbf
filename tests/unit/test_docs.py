"""The docs stay true: the table reference is the generated one (no hand edits, no stale
columns), the cookbook has its queries, and every relative link in the README and docs/
points at a file that exists."""

import re

from jobs.table_docs import BEGIN, END, TABLES_DOC, cookbook_queries, markdown
from kmon.config import REPO_ROOT


def test_table_reference_is_current():
    text = TABLES_DOC.read_text()
    assert text[text.index(BEGIN):text.index(END) + len(END)] == markdown(), (
        "docs/tables.md is stale: run `python -m jobs.table_docs --write`")


def test_every_silver_table_and_column_is_documented():
    from jobs.streams import STREAMS
    doc = markdown()
    for s in STREAMS:
        assert f"silver.{s.name}" in doc
        for col in s.table.SILVER_SCHEMA.fieldNames():
            assert f"| `{col}` |" in doc


def test_cookbook_has_root_cause_queries():
    queries = cookbook_queries()
    assert len(queries) >= 6
    assert all(q.lstrip().startswith("--") and "SELECT" in q for q in queries)


def _anchors(markdown_text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"```.*?```", "", markdown_text, flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_relative_links_in_readme_and_docs_resolve():
    broken = []
    for doc in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)  # no links in code
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = doc.parent / path if path else doc
            if not file.exists():
                broken.append(f"{doc.relative_to(REPO_ROOT)}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
                broken.append(f"{doc.relative_to(REPO_ROOT)}: {target} (no such heading)")
    assert not broken, broken
