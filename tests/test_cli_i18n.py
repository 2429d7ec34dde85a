"""The ``kb`` command speaks the user's language (#35 item 1): Simplified Chinese under a Chinese locale
(``LANG=zh_CN.UTF-8``) or with ``--lang zh``, English otherwise; ``--json`` stays the same machine-readable English
envelope whatever the language. Run as a user runs it: the real entry point in a process of its own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CJK = re.compile(r"[\u4e00-\u9fff]")
LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")


def kb(home: Path, *args: str, lang: str = "C.UTF-8") -> subprocess.CompletedProcess[str]:
    """``kb --home HOME ARGS`` with the locale ``LANG=lang`` (the other locale variables unset)."""
    env = {key: value for key, value in os.environ.items() if key not in LOCALE_VARIABLES}
    env.update({"LANG": lang, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT), "PYTHONIOENCODING": "utf-8"})
    return subprocess.run(
        [sys.executable, "-m", "kb_core.edges.cli", "--home", str(home), *args],
        capture_output=True, text=True, encoding="utf-8", timeout=180, cwd=REPO_ROOT, env=env,
    )  # fmt: skip


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_a_chinese_locale_gets_the_error_in_chinese_and_english_stays_english(home: Path) -> None:
    chinese = kb(home, "create", "测试/斜杠", "--chunk-size", "64", "--embedding-model", "hashing", lang="zh_CN.UTF-8")
    assert chinese.returncode == 1
    assert chinese.stderr.startswith("错误：知识库名称 '测试/斜杠' 含有 '/'"), chinese.stderr
    assert "不允许使用路径分隔符和控制字符" in chinese.stderr and "not allowed" not in chinese.stderr
    english = kb(home, "create", "测试/斜杠", "--chunk-size", "64", "--embedding-model", "hashing", lang="en_US.UTF-8")
    assert english.returncode == 1
    assert english.stderr.strip() == (
        "error: kb_name '测试/斜杠' contains '/'; path separators and control characters are not allowed."
    )


def test_lang_chooses_the_language_whatever_the_locale(home: Path) -> None:
    listed = kb(home, "--lang", "zh", "list", lang="en_US.UTF-8")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == ["共 0 个知识库。", "（无）"]
    listed = kb(home, "--lang", "en", "list", lang="zh_CN.UTF-8")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == ["0 knowledge base(s).", "(none)"]
    refused = kb(home, "--lang", "fr", "list")
    assert refused.returncode == 2 and "--lang" in refused.stderr


def test_json_is_the_same_english_envelope_in_every_language(home: Path) -> None:
    bad = ("--json", "create", "测试/斜杠", "--chunk-size", "64", "--embedding-model", "hashing")
    english = kb(home, *bad, lang="en_US.UTF-8")
    chinese = kb(home, *bad, lang="zh_CN.UTF-8")
    forced = kb(home, "--lang", "zh", *bad)
    assert english.stdout == chinese.stdout == forced.stdout
    envelope = json.loads(chinese.stdout)
    assert envelope["message"].startswith("kb_name '测试/斜杠' contains '/'")
    assert envelope["error"]["code"] == "INVALID_ARGUMENT"
    created = kb(home, "--json", "create", "notes", "--chunk-size", "64", "--embedding-model", "hashing",
                 lang="zh_CN.UTF-8")  # fmt: skip
    assert json.loads(created.stdout)["message"] == (
        "Created knowledge base 'notes'. Select it with `kb select NAME` to use it."
    )
    listed = json.loads(kb(home, "--json", "list", lang="zh_CN.UTF-8").stdout)
    assert listed["message"] == "1 knowledge base(s)." and list(listed["data"]) == [
        "knowledge_bases", "count", "current_kb_id"
    ]


def test_an_operations_success_messages_and_tables_are_chinese(home: Path, tmp_path: Path) -> None:
    created = kb(home, "create", "笔记", "--chunk-size", "64", "--embedding-model", "hashing", lang="zh_CN.UTF-8")
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == "已创建知识库“笔记”。用 `kb select NAME` 选中它后即可使用。"
    assert kb(home, "select", "笔记", lang="zh_CN.UTF-8").stdout.strip() == "已选中知识库“笔记”。"
    listed = kb(home, "list", lang="zh_CN.UTF-8").stdout
    assert listed.splitlines()[0] == "共 1 个知识库。"
    assert "名称" in listed and "分块大小" in listed and "chunk size" not in listed
    document = tmp_path / "保险.txt"
    document.write_text("保险理赔需要提交身份证明和医疗发票。", encoding="utf-8")
    imported = kb(home, "import", str(document), lang="zh_CN.UTF-8")
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith("已向“笔记”导入 1 个文件中的 1 个。")
    found = kb(home, "search", "理赔", lang="zh_CN.UTF-8")
    assert found.returncode == 0, found.stderr
    assert found.stdout.startswith("找到 1 个文本块（混合检索，实际权重：向量 0.70 / 关键词 0.30）。"), found.stdout
    deleted = kb(home, "delete", "笔记", lang="zh_CN.UTF-8")
    assert deleted.returncode == 1
    assert deleted.stderr.strip() == "错误：知识库“笔记”是当前知识库，不能删除；请先选择另一个知识库。"


def test_why_a_file_failed_to_import_is_said_in_chinese(home: Path, tmp_path: Path) -> None:
    assert kb(home, "create", "notes", "--chunk-size", "64", "--embedding-model", "hashing").returncode == 0
    assert kb(home, "select", "notes").returncode == 0
    good, empty, pdf = tmp_path / "good.txt", tmp_path / "empty.txt", tmp_path / "scan.pdf"
    good.write_text("apples and pears", encoding="utf-8")
    empty.write_text("", encoding="utf-8")
    pdf.write_bytes(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n")
    imported = kb(home, "import", str(good), str(empty), str(pdf), lang="zh_CN.UTF-8")
    assert imported.returncode == 3, imported.stderr  # some files failed
    summary, *table = imported.stdout.splitlines()
    assert summary.startswith("已向“notes”导入 3 个文件中的 1 个；2 个失败。")
    assert "empty.txt：无法导入“empty.txt”：文档中没有文本。" in summary
    assert "无法导入“scan.pdf”：这是一个 PDF 文件；支持的格式为文本文件" in summary
    rows = "\n".join(table)
    assert "文件" in rows and "结果" in rows and "成功" in rows
    assert "无法导入“empty.txt”：文档中没有文本" in rows and "contains no text" not in rows
    # The same import said in English, and in the JSON envelope, reads as before.
    again = kb(home, "--json", "import", str(empty), lang="zh_CN.UTF-8")
    failed = json.loads(again.stdout)["data"]["failed_files"]
    assert failed[0]["error"] == "Cannot import 'empty.txt': the document contains no text"
