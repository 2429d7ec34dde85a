"""What the library says to people can be said in Simplified Chinese at the edge (#35 item 1): why a file could not
be imported (encrypted, too large, too slow, not a supported format), a public demo's quotas and read-only refusals,
and the result of an import, while the English every log, envelope and MCP client reads stays as it was."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from kb_core.base.errors import ParseError
from kb_core.base.i18n import Text, localize
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.parsing import ParseLimits, parse_file
from kb_core.features.results import SearchRequest
from kb_core.session.public_demo import DemoLimits, PublicDemo
from kb_core.session.service import KnowledgeBaseService

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
ENCRYPTED = SHARED / "fixtures" / "docs" / "apache-poi" / "PasswordProtected.doc"
CJK = re.compile(r"[\u4e00-\u9fff]")


def chinese(text: object) -> str:
    """``text`` said in Chinese; it must be a Text, and read as Chinese once the file names are left out."""
    assert isinstance(text, Text), f"not a Text: {text!r}"
    said = str(localize(text, "zh"))
    assert CJK.search(said), said
    return said


def refusal(path: Path, limits: ParseLimits = ParseLimits()) -> ParseError:  # noqa: B008
    with pytest.raises(ParseError) as raised:
        parse_file(path, limits)  # in a parser process: the Text crosses the process boundary
    return raised.value


@pytest.mark.skipif(not ENCRYPTED.is_file(), reason="the shared fixtures are not here")
def test_an_encrypted_word_file_is_refused_in_either_language() -> None:
    error = refusal(ENCRYPTED)
    assert error.code == "ENCRYPTED_DOCUMENT"
    assert error.message == (
        "Cannot import 'PasswordProtected.doc': the document is password-protected (encrypted); remove the password "
        "in Word and import it again"
    )
    assert chinese(error.message) == (
        "无法导入“PasswordProtected.doc”：文档受密码保护（已加密）；请在 Word 中移除密码后重新导入"
    )


def test_too_large_too_slow_unsupported_and_empty_files_are_said_in_chinese(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text("知识库 " * 4000, encoding="utf-8")
    error = refusal(big, ParseLimits(max_file_bytes=4096))
    assert error.code == "FILE_TOO_LARGE"
    assert re.fullmatch(r"无法导入“big\.txt”：文件大小为 [0-9.]+ MB，超过了 [0-9.]+ MB 的上限", chinese(error.message))

    slow = tmp_path / "slow.txt"
    slow.write_bytes(("检索增强生成 retrieval augmented generation 知识库。\n" * 400_000).encode("gb18030"))
    parse_file(big)  # a warm worker: the timeout below measures parsing only
    started = time.monotonic()
    error = refusal(slow, ParseLimits(timeout_seconds=0.05))
    assert error.code == "PARSE_TIMEOUT" and time.monotonic() - started < 10
    assert re.fullmatch(r"无法导入“slow\.txt”：解析超过了 [0-9.]+ 秒，已被停止", chinese(error.message))

    pdf = tmp_path / "scan.pdf"
    pdf.write_bytes(b"%PDF-1.4\n1 0 obj\n")
    error = refusal(pdf)
    assert error.code == "UNSUPPORTED_FORMAT"
    assert error.message.startswith("Cannot import 'scan.pdf': it is a PDF file; supported are text files")
    assert chinese(error.message).startswith("无法导入“scan.pdf”：这是一个 PDF 文件；支持的格式为文本文件")

    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    error = refusal(empty)
    assert error.code == "EMPTY_DOCUMENT"
    assert chinese(error.message) == "无法导入“empty.txt”：文档中没有文本"


def test_a_demo_visitors_quotas_and_read_only_refusals_are_said_in_chinese(tmp_path: Path) -> None:
    service = KnowledgeBaseService(tmp_path / "home")
    assert Enveloped(service.session()).create_knowledge_base("shared", 64, "hashing")["success"]
    limits = DemoLimits(kbs_per_visitor=1, files_per_import=2, searches_per_minute=1)
    demo = PublicDemo(service, limits, models=("hashing",), exchange_root=tmp_path / "exchange")
    demo.ledger.publish(service.find_kb("shared").id)
    visitor = Enveloped(demo.visitor_session("v" * 32))
    mine = visitor.create_knowledge_base("mine", 64, "hashing")
    assert mine["success"]
    second = visitor.create_knowledge_base("another", 64, "hashing")
    assert second["message"] == "This demo keeps at most 1 knowledge bases per visitor; delete one of yours first."
    assert chinese(second["message"]) == "本演示每位访客最多保留 1 个知识库；请先删除你的一个知识库。"
    read_only = visitor.delete_knowledge_base("shared")
    assert read_only["error"]["code"] == "PERMISSION_DENIED"
    assert chinese(read_only["message"]) == (
        "“shared”是本演示中共享的只读知识库：你可以检索、查看、评估和导出它，但不能删除它。如需这样做，请创建你自己的知识库。"
    )
    visitor.select_knowledge_base(mine["data"]["kb_name"])
    too_many = visitor.import_document([str(tmp_path / f"f{i}.txt") for i in range(3)])
    assert chinese(too_many["message"]) == "本演示每次最多导入 2 个文件；这次给了 3 个。"
    visitor.search(SearchRequest("anything"))
    limited = visitor.search(SearchRequest("anything"))
    assert limited["error"]["code"] == "RATE_LIMITED"
    said = chinese(limited["message"])
    assert re.fullmatch(r"本演示每位访客每分钟最多检索 1 次（一次评估算一次）；请 \d+ 秒后再试。", said), said


def test_an_imports_result_names_each_failure_in_chinese(tmp_path: Path) -> None:
    session = Enveloped(KnowledgeBaseService(tmp_path / "home").session())
    session.create_knowledge_base("笔记", 64, "hashing")
    session.select_knowledge_base("笔记")
    good = tmp_path / "good.txt"
    good.write_text("保险理赔需要提交身份证明。", encoding="utf-8")
    report = session.import_document([str(good), str(tmp_path / "missing.txt")])
    message = report["message"]
    assert message.startswith("Imported 1 of 2 file(s) into '笔记'; 1 failed. missing.txt: ")
    said = chinese(message)
    assert said.startswith("已向“笔记”导入 2 个文件中的 1 个；1 个失败。missing.txt：")
    assert said.endswith("不存在。"), said
    assert chinese(report["data"]["failed_files"][0]["error"]).endswith("不存在。")
