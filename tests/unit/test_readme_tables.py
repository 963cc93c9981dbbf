"""The README's table reference is the generated one (no hand edits, no stale columns)."""

from jobs.table_docs import BEGIN, END, README, cookbook_queries, markdown


def test_readme_table_reference_is_current():
    text = README.read_text()
    assert text[text.index(BEGIN):text.index(END) + len(END)] == markdown(), (
        "README tables are stale: run `python -m jobs.table_docs --write`")


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
