"""Hostile bundles: alias cycles and expansions, huge values, non-JSON YAML, all refused in bounded time and memory.

Each reproducer that once ran without end runs in a child interpreter under an address-space cap and a time
limit (tests/bounded.py), so a regression fails here instead of eating the machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kb_core.base.errors import ImportFormatError
from kb_core.edges.envelopes import Enveloped
from kb_core.features import bundles
from kb_core.features.bundles.loading import BundleLimits, load_bundle_text
from kb_core.features.bundles.validation import BundleValidator
from kb_core.session.service import KnowledgeBaseService
from tests.bounded import peak_mb, run_bounded

# A list or mapping that contains itself: expanding it never ends.
CYCLES = {
    "list in itself": "- &a [*a]",
    "mapping in itself": "&a {k: *a}",
    "deeper cycle": "- &a {k: [1, {j: *a}]}",
    "merge key into itself": "- &a {<<: *a}",
    "inside an item": "- type: Document\n  doc_uri: d1\n  content: &c [x, *c]\n",
}


@pytest.mark.parametrize("text", list(CYCLES.values()), ids=list(CYCLES))
def test_alias_cycle_is_refused_at_once_in_bounded_memory(text: str) -> None:
    out = run_bounded(
        f"""
        from kb_core.features.bundles.loading import load_bundle_text
        from kb_core.base.errors import ImportFormatError
        try:
            load_bundle_text({text!r})
        except ImportFormatError as exc:
            print("refused:", exc.code, exc)
        """,
        memory_mb=512,
        timeout_s=30,
    )
    assert "refused: INVALID_IMPORT_FILE" in out and "includes itself through an alias" in out, out
    assert "line 1" in out or "line 3" in out


@pytest.fixture
def session(tmp_path: Path) -> Any:
    service = KnowledgeBaseService(tmp_path / "home")
    session = Enveloped(service.session())
    assert session.create_knowledge_base("graph", 128, embedding_model="hashing")["success"]
    assert session.select_knowledge_base("graph")["success"]
    return session


def test_alias_cycle_through_the_cli_is_a_bundle_refusal(tmp_path: Path) -> None:
    """`kb bundle import` (the MCP tool calls the same service function) answers BUNDLE_INVALID in seconds."""
    bundle = tmp_path / "cycle.yaml"
    bundle.write_text("- &a [*a]\n", encoding="utf-8")
    home = tmp_path / "home"
    out = run_bounded(
        f"""
        import json
        from kb_core.edges.cli.main import main
        home = {str(home)!r}
        assert main(["--home", home, "create", "c", "--chunk-size", "64", "--embedding-model", "hashing"]) == 0
        assert main(["--home", home, "select", "c"]) == 0
        print("exit", main(["--home", home, "--json", "bundle", "import", {str(bundle)!r}]))
        """,
        memory_mb=2048,
        timeout_s=120,
    )
    envelope = json.loads(out[out.index('{\n  "success"') : out.rindex("}") + 1])
    assert "exit 1" in out
    assert envelope["error"]["code"] == "BUNDLE_INVALID"
    assert "Validation error at root: The YAML contains a value that includes itself" in envelope["message"]
    assert bundle.exists()  # kept for the author to fix


def test_alias_cycle_through_the_service_changes_nothing(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("- {type: Document, doc_uri: a, content: alpha}\n", encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {type: Document, doc_uri: b, content: beta}\n- &a {k: *a}\n", encoding="utf-8")
    out = run_bounded(
        f"""
        import json
        from kb_core.edges.envelopes import Enveloped
        from kb_core.session.service import KnowledgeBaseService
        session = Enveloped(KnowledgeBaseService({str(tmp_path / "home")!r}).session())
        assert session.create_knowledge_base("graph", 128, embedding_model="hashing")["success"]
        assert session.select_knowledge_base("graph")["success"]
        assert session.import_knowledge_bundle({str(good)!r})["success"]
        result = session.import_knowledge_bundle({str(bad)!r})
        names = sorted(d["name"] for d in session.list_documents()["data"]["documents"])
        print(json.dumps({{"result": result, "names": names}}))
        """,
        memory_mb=2048,
        timeout_s=120,
    )
    answer = json.loads(out.splitlines()[-2])
    result = answer["result"]
    assert result["error"]["code"] == "BUNDLE_INVALID"
    assert result["error"]["details"]["errors"][0]["path"] == "root"
    assert "line 2" in result["message"] and bad.exists()
    assert answer["names"] == ["a"]


def test_billion_laughs_dag_at_the_alias_limit_is_refused_in_linear_time() -> None:
    """50 levels of two aliases each (100 aliases, the limit) would expand to 2^50 values."""
    lines = ["l0: &l0 [lol, lol]"] + [f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]" for i in range(1, 51)]
    out = run_bounded(
        f"""
        import time
        from kb_core.features.bundles.loading import load_bundle_text
        from kb_core.base.errors import ImportFormatError
        started = time.perf_counter()
        try:
            load_bundle_text({chr(10).join(lines)!r})
        except ImportFormatError as exc:
            print("refused:", exc, "seconds:", time.perf_counter() - started)
        """,
        memory_mb=512,
        timeout_s=30,
    )
    assert "expands to more than 2000000 values" in out, out
    assert float(out.split("seconds:")[1].split()[0]) < 5
    assert peak_mb(out) < 400


def test_aliases_repeating_a_long_text_are_refused_by_expanded_characters() -> None:
    limits = BundleLimits(max_text_chars=1_000_000)
    text = "- &t " + "x" * 20_000 + "\n" + "".join("- *t\n" for _ in range(60))
    with pytest.raises(ImportFormatError, match="text expands to more than 1,000,000 characters"):
        load_bundle_text(text, limits)
    assert len(load_bundle_text(text, BundleLimits(max_text_chars=2_000_000))) == 61


def test_a_string_over_the_value_limit_is_refused_at_its_item_and_field(session: Any, tmp_path: Path) -> None:
    limit = BundleLimits().max_value_chars
    huge = "数据" * (limit // 2 + 1)
    items = [
        {"type": "Document", "doc_uri": "small", "content": "fine"},
        {"type": "Document", "doc_uri": "big", "content": huge},
        {"type": "REFERENCES", "source": {"doc_uri": "x" * (limit + 1)}, "target": {"doc_uri": "small"}},
    ]
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(items, allow_unicode=True, width=10**9), encoding="utf-8")
    result = session.import_knowledge_bundle(path)
    assert result["error"]["code"] == "BUNDLE_INVALID"
    errors = result["error"]["details"]["errors"]
    assert [e["path"] for e in errors] == ["[1].content", "[2].source.doc_uri"]
    assert f"Validation error at [1].content: the text is {limit + 2:,} characters long; at most {limit:,}" in (
        result["message"]
    )
    assert len(result["message"]) < 2000  # the value itself is not echoed back
    assert session.list_documents()["data"]["documents"] == []


def test_a_string_at_the_value_limit_is_accepted() -> None:
    validator = BundleValidator(bundles.default_ontology(), max_value_chars=100)
    nodes, _, errors = validator.structural([{"type": "Document", "doc_uri": "d", "content": "字" * 100}])
    assert not errors and len(nodes) == 1
    _, _, errors = validator.structural([{"type": "Document", "doc_uri": "d", "content": "字" * 101}])
    assert [e.path for e in errors] == ["[0].content"]


def test_an_overlong_field_name_is_refused_without_echoing_it() -> None:
    validator = BundleValidator(bundles.default_ontology(), max_value_chars=1000)
    _, _, errors = validator.structural([{"type": "Document", "doc_uri": "d", "k" * 5000: 1}])
    assert [e.path for e in errors] == ["[0]"]
    assert "a field name is 5,000 characters long" in errors[0].message


def test_schema_errors_quote_long_values_shortened() -> None:
    validator = BundleValidator(bundles.default_ontology())
    _, _, errors = validator.structural([{"type": "Document", "doc_uri": "d", "content": ["y" * 100_000]}])
    assert errors and errors[0].path == "[0].content"
    assert len(errors[0].message) < 500 and "characters in all" in errors[0].message


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("- " + "1" * 5000, "cannot be read: Exceeds the limit (4300 digits)"),
        ("- 0x" + "f" * 5000, "is too large"),
        ("- !!int abc", "cannot be read"),
        ("- !!float abc", "cannot be read"),
        ("- !!binary AAAA", "tag 'binary'"),
        ("- !!set {a, b}", "tag 'set'"),
        ("- !!omap [a: 1]", "tag 'omap'"),
        ("- !!timestamp 2020-01-01", "tag 'timestamp'"),
        ("- !!python/object:os.system x", "not valid YAML"),
    ],
)
def test_values_a_json_bundle_cannot_hold_are_refused_clearly(text: str, reason: str) -> None:
    with pytest.raises(ImportFormatError, match=r"line 1|not valid YAML") as info:
        load_bundle_text(text)
    assert reason in info.value.message


# -- found by tests/test_fuzz.py -------------------------------------------------------------------------------
def test_an_empty_tagged_integer_is_refused_clearly() -> None:
    with pytest.raises(ImportFormatError, match="line 1 cannot be read"):
        load_bundle_text("- !!int ")


def test_keys_that_are_not_text_are_reported_not_crashed_on() -> None:
    validator = BundleValidator(bundles.default_ontology())
    data = load_bundle_text("- {type: Document, doc_uri: d, content: c, 1: one, null: n, extra: x}")
    _, _, errors = validator.structural(data)
    assert len(errors) == 1 and errors[0].index == 0
    assert "1, None, 'extra' not allowed here" in errors[0].message


# -- numbers that are not finite: refused where they enter, never written ------------------------------------------
READINGS = {"nodes": {"Reading": {"identity": ["id"], "json_schema": {"type": "object", "properties": {
    "id": {"type": "string"}, "value": {"type": "number"}, "series": {"type": "array"}}}}}, "edges": {}}  # fmt: skip


@pytest.mark.parametrize("number", [".nan", ".NaN", ".inf", "-.inf", "+.INF"])
def test_a_number_that_is_not_finite_is_refused_at_its_place(number: str) -> None:
    validator = BundleValidator(bundles.parse_ontology(READINGS))
    data = load_bundle_text(f"- {{type: Reading, id: a, value: 1}}\n- {{type: Reading, id: b, series: [1, {number}]}}")
    _, _, errors = validator.structural(data)
    assert [e.path for e in errors] == ["[1].series[1]"]
    assert "is not a finite number" in errors[0].text


def test_a_bundle_with_nan_is_refused_and_the_home_stays_restorable(session: Any, tmp_path: Path) -> None:
    """Once ``.nan`` passed ``{type: number}``, was written as ``NaN`` into the graph state, and the export of the
    home could not be imported again."""
    assert session.set_ontology(READINGS)["success"]
    path = tmp_path / "readings.yaml"
    path.write_text("- {type: Reading, id: a, value: 2.5}\n- {type: Reading, id: b, value: .nan}\n", encoding="utf-8")
    refused = session.import_knowledge_bundle(str(path), delete_file=False)
    assert refused["error"]["code"] == "BUNDLE_INVALID" and "[1].value" in refused["message"], refused["message"]
    path.write_text("- {type: Reading, id: a, value: 2.5}\n", encoding="utf-8")
    assert session.import_knowledge_bundle(str(path))["success"]
    assert session.export_database(str(tmp_path / "home.kbx"))["success"]
    restored = Enveloped(KnowledgeBaseService(tmp_path / "other").session()).import_database(str(tmp_path / "home.kbx"))
    assert restored["success"], restored["message"]


def test_an_ontology_with_a_number_that_is_not_finite_is_refused(session: Any) -> None:
    ontology = json.loads(json.dumps(READINGS))
    ontology["nodes"]["Reading"]["json_schema"]["properties"]["value"]["maximum"] = float("inf")
    refused = session.set_ontology(ontology)
    assert refused["error"]["code"] == "INVALID_ARGUMENT" and "not finite" in refused["message"], refused["message"]


def test_json_is_never_written_with_nan(tmp_path: Path) -> None:
    from kb_core.base.atomic import write_json_atomically
    from kb_core.base.errors import KBError

    with pytest.raises(KBError) as refused:
        write_json_atomically(tmp_path / "state.json", {"weights": [0.7, float("nan")]})
    assert refused.value.code == "NOT_JSON" and not (tmp_path / "state.json").exists()


# -- wide rather than deep: values are counted as they are read, before anything more is built ---------------------
@pytest.mark.parametrize("line", ["- x\n", "- {}\n", "- []\n", "- 1\n"])
def test_a_flat_bundle_over_the_value_budget_is_refused_as_it_is_read(line: str) -> None:
    """No alias at all: once every value became a ~250-byte node before anything was counted (a 4 MB file reached
    1.04 GB) and the refusal blamed aliases ("billion laughs?"). 500,000 values under a 200,000-value budget."""
    out = run_bounded(
        f"""
        from kb_core.features.bundles.loading import BundleLimits, load_bundle_text
        from kb_core.base.errors import ImportFormatError
        try:
            load_bundle_text({line!r} * 500_000, BundleLimits(max_values=200_000))
        except ImportFormatError as exc:
            print("refused:", exc)
        """,
        memory_mb=1024,
        timeout_s=60,
    )
    assert "refused: The bundle holds more than 200,000 values" in out and "alias" not in out, out
    assert peak_mb(out) < 200, out  # the 2 MB text and the values read so far; the whole file as nodes: 350 MB


@pytest.mark.parametrize(
    ("text", "first", "second"),
    [
        ("- {type: Document, 1: a, 0x1: b}", "1", "0x1"),
        ("- {type: Document, yes: a, true: b}", "yes", "true"),
        ("- {type: Document, 1: a, 1.0: b}", "1", "1.0"),
        ("- {type: Document, null: a, ~: b}", "null", "~"),
        ("- {type: Document, 010: a, 8: b}", "010", "8"),
    ],
)
def test_keys_equal_once_read_are_duplicates(text: str, first: str, second: str) -> None:
    """``1`` and ``0x1`` are both the integer 1: PyYAML kept the last value silently."""
    with pytest.raises(ImportFormatError) as refused:
        load_bundle_text(text)
    assert f"Duplicate key {second!r} (the same key as {first!r} once read)" in refused.value.message


def test_merge_keys_follow_pyyaml_and_count_against_the_budget() -> None:
    text = "- &base {type: Document, doc_uri: a, content: x}\n- {<<: *base, doc_uri: b}\n- {<<: [*base], content: y}"
    assert load_bundle_text(text) == yaml.safe_load(text)
    with pytest.raises(ImportFormatError, match="through aliases"):
        load_bundle_text(text, BundleLimits(max_values=12))
