"""The Search lab, Evaluate and Knowledge graph pages in Chinese (#35 item 1), driven by Streamlit's AppTest: with the
session's language set to Chinese, what a person reads there (titles, buttons, labels, tabs, results, table headers,
the score bars) is Chinese, while the widgets' keys and option values stay what the code and the other tests use."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the pages import their helpers from `pages` (pages/_service.py, _picker.py …)

from streamlit.testing.v1 import AppTest  # noqa: E402

from kb_core import KnowledgeBaseService  # noqa: E402

CJK = re.compile(r"[\u4e00-\u9fff]")
# Names that stay as they are in Chinese text: file names, metrics, methods, formats.
KEPT = re.compile(r"BM25|RRF|Jaccard|nDCG@10|Recall@100|MRR@10|BEIR|YAML|JSON|CSV|top_k|rag_search|explain_search|"
                  r"example\.yaml|bundle-schema\.json|queries\.jsonl|qrels\.tsv|corpus\.jsonl|KB")


def english_words(label: str) -> list[str]:
    """Words of three or more Latin letters left in ``label`` once the names kept in Chinese text are taken out."""
    return re.findall(r"[A-Za-z]{3,}", KEPT.sub("", label))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "home"
    session = Enveloped(KnowledgeBaseService(path).session())
    assert session.create_knowledge_base("Alpha", 128, embedding_model="hashing")["success"]
    files = ["kb_workbench_overview.txt", "混合检索.docx", "hybrid_search.docx"]
    assert session.import_document([str(DEMO / f) for f in files], kb_name="Alpha")["data"]["success_count"] == 3
    return path


@pytest.fixture
def filled(tmp_path: Path, template: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    shutil.copytree(template, home)
    monkeypatch.setenv("KB_HOME", str(home))
    monkeypatch.setenv("KB_DEMO", "0")
    return home


def chinese_app(page: str) -> AppTest:
    """The app with the sidebar's language choice on Chinese, switched to ``page``."""
    test = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    test.session_state["kb_language"] = "zh"
    test.run()
    assert not test.exception, test.exception
    test.switch_page(f"pages/{page}.py").run()
    assert not test.exception, test.exception
    return test


def texts(test: AppTest, kind: str) -> list[str]:
    return [str(e.value) for e in getattr(test.main, kind)]


def labels(test: AppTest) -> list[str]:
    """The labels of the page's own widgets (the sidebar is another page's concern)."""
    main = test.main
    kinds = ("button", "toggle", "slider", "radio", "selectbox", "multiselect", "text_input", "number_input",
             "text_area", "expander", "tabs", "metric")
    found = [str(w.label) for kind in kinds for w in getattr(main, kind)]
    found += [str(w.label) for w in main.get("download_button")]
    return found


def assert_chinese(test: AppTest) -> None:
    shown = labels(test)
    assert shown
    english = {label: english_words(label) for label in shown if english_words(label)}
    assert not english, f"English left in the page's labels: {english}"
    assert all(CJK.search(label) for label in shown if label not in ("A", "B")), shown


def test_the_search_lab_in_chinese(filled: Path) -> None:
    test = chinese_app("search_lab")
    assert [t.value for t in test.main.title] == ["检索实验室"]
    (submit,) = [b for b in test.main.button if b.key.startswith("FormSubmitter:lab_form")]
    assert submit.label == "检索"
    assert any("输入查询并点击 **检索**" in i for i in texts(test, "info"))
    assert_chinese(test)
    # the option values stay what the code (and CLI, MCP) use; the reader sees them in Chinese
    mode = next(s for s in test.main.selectbox if s.key.endswith("_mode"))
    assert mode.value == "hybrid" and mode.options == ["混合", "语义", "关键词"]

    test.text_input(key="lab_query").input("混合检索 权重")
    submit.click().run()
    assert not test.exception, test.exception
    assert_chinese(test)
    assert [t.label for t in test.main.tabs] == ["结果", "各模式间的排名变化", "A/B 对比"]
    cards = [m for m in texts(test, "markdown") if m.startswith("**#")]
    assert cards and all("（0–1 分制）" in c and "on a 0–1 scale" not in c for c in cards)
    bars = next(m for m in texts(test, "markdown") if m.startswith("<div class='kb-bars'>"))
    assert "最终得分" in bars and "得分（0–1 分制）" in bars and "final score" not in bars
    captions = " ".join(texts(test, "caption"))
    assert "匹配词：" in captions and "Matched terms" not in captions
    assert "得分在 0–1 之间" in captions and "本应用的服务" in captions
    # a breakdown opened: its arithmetic caption and its table in Chinese
    test.session_state["lab_breakdown_1"] = True
    test.run()
    assert any(c.endswith(tuple("0123456789")) and "= 最终 " in c for c in texts(test, "caption"))
    table = test.main.table[0].value
    assert list(table.columns) == ["项目", "值"] and "最终得分（0–1）" in list(table["项目"])
    # the A/B tab: Chinese headers over the same columns
    test.session_state["lab_tabs"] = "A/B 对比"
    test.run()
    assert not test.exception, test.exception
    assert_chinese(test)
    assert {"共同的文本块", "重合度（Jaccard）"} <= {m.label for m in test.main.metric}


def test_the_search_lab_says_the_search_notes_and_auto_weighting_reasons_in_chinese(filled: Path) -> None:
    """The notes under the weights are the search's own (#38), said in Chinese; auto weighting's reasons are said
    after one lead-in of the page's, each without the notes' own lead-in (自动权重：)."""
    from kb_core.base.i18n import localize

    query = "what is hybrid"
    test = chinese_app("search_lab")
    test.text_input(key="lab_query").input(query)
    next(b for b in test.main.button if b.key.startswith("FormSubmitter:lab_form")).click().run()
    prefix = next(s.key for s in test.main.slider if s.key.endswith("_min_score")).removesuffix("_min_score")
    test.slider(key=f"{prefix}_min_score").set_value(0.3).run()
    assert not test.exception, test.exception
    session = Enveloped(KnowledgeBaseService(filled).session())
    session.select_knowledge_base("Alpha")
    said = localize(session.search(SearchRequest(query, min_score=0.3))["message"], "zh")
    notes = [c for c in texts(test, "caption") if c in said]
    assert len(notes) == 3 and all("not shown" not in n and "left out" not in n for n in notes), notes
    # auto weighting would move this query's weights (the hashing embedder's vector carries no information here)
    (reason,) = session.search(SearchRequest(query, weighting="fixed"))["data"]["weights"]["auto_notes"]
    caption = next(c for c in texts(test, "caption") if c.startswith("自动权重："))
    assert caption.count("自动权重：") == 1 and "auto weights" not in caption, caption
    assert caption == "自动权重：" + localize(reason, "zh").removeprefix("自动权重："), caption


def test_a_long_chunk_unfolds_with_chinese_words(filled: Path, tmp_path: Path) -> None:
    claim = "申请保险理赔需要准备以下材料：保单和身份证。"
    guide = "本公司坚持以客户为中心的服务理念。" * 40 + claim + "其他说明。" * 40
    (tmp_path / "理赔指南.txt").write_text(guide, encoding="utf-8")
    session = Enveloped(KnowledgeBaseService(filled).session())
    assert session.create_knowledge_base("保险", 1024, "hashing")["success"]
    assert session.import_document([str(tmp_path / "理赔指南.txt")], kb_name="保险")["success"]
    test = chinese_app("knowledge_bases")
    test.session_state["kb_session"].select_knowledge_base("保险")
    test.switch_page("pages/search_lab.py").run()
    test.text_input(key="lab_query").input("保险理赔需要哪些材料？")
    next(b for b in test.main.button if b.key.startswith("FormSubmitter:lab_form")).click().run()
    card = next(m for m in texts(test, "markdown") if "<details class='kb-chunk'>" in m)
    assert "展开全文 ▾" in card and "收起 ▴" in card and "show all" not in card


def write_judgments(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    queries = [{"_id": "q1", "text": "how are the vector and keyword scores fused"},
               {"_id": "q2", "text": "混合检索 权重"}]
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q, ensure_ascii=False) for q in queries) + "\n",
                                          encoding="utf-8")
    (folder / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\thybrid_search.docx\t1\nq2\t混合检索.docx\t1\n", encoding="utf-8"
    )
    return folder


def test_evaluate_in_chinese(filled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_ALLOW_DIRS", str(tmp_path))
    test = chinese_app("evaluate")
    assert [t.value for t in test.main.title] == ["评估检索效果"]
    assert test.button(key="eval_run").label == "运行评估"
    source = test.radio(key="eval_source")
    assert source.value == "Folder on the server" and "服务器上的文件夹" in source.options
    assert test.multiselect(key="eval_modes").value == ["hybrid", "semantic", "keyword"]
    assert_chinese(test)

    test.text_input(key="eval_folder").input(str(write_judgments(tmp_path / "beir")))
    test.run()
    test.slider(key="eval_steps").set_value(2)
    test.button(key="eval_run").click().run()
    assert not test.exception and not texts(test, "error"), texts(test, "error")
    assert any(s.startswith("已保存为评估记录 ") for s in texts(test, "success")), texts(test, "success")
    assert "结果 · Alpha" in texts(test, "subheader") and "对比评估记录" in texts(test, "subheader")
    assert any(m.startswith("**最佳扫描点：**") for m in texts(test, "markdown"))
    assert test.button(key="eval_save_best").label == "将最佳设置保存为知识库默认设置"
    assert_chinese(test)
    # the metrics table keeps its column names (the CSV's); the headers a person reads are Chinese
    metrics = test.main.dataframe[0]
    assert {"setting", "queries"} <= set(metrics.value.columns)
    test.button(key="eval_save_best").click().run()
    assert any("固定权重，加权融合" in s for s in texts(test, "success")), texts(test, "success")


def test_the_knowledge_graph_in_chinese(filled: Path) -> None:
    test = chinese_app("knowledge_graph")
    assert [t.value for t in test.main.title] == ["知识图谱"]
    assert {t.label for t in test.main.tabs} == {"图谱", "导入知识包", "本体", "结构定义", "粘贴 YAML", "上传文件"}
    assert any("此知识库还没有节点" in i for i in texts(test, "info"))
    assert_chinese(test)
