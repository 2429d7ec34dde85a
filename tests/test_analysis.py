"""The multilingual analyzer: English, Chinese, mixed and full-width text, names, quiet lazy jieba."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap

import pytest

from kb_core.base.errors import InvalidArgument
from kb_core.engines.analysis import ENGLISH_STOP_WORDS, Analyzer, analyzer_from_name, default_analyzer


def test_english_is_lowercased_and_stemmed() -> None:
    tokens = default_analyzer().tokens("Running RUNS quickly; the Indexes were Indexed")
    assert tokens == ["run", "run", "quick", "index", "were", "index"]


def test_english_without_stemming_keeps_words_and_stop_words_can_stay() -> None:
    analyzer = Analyzer(stem=None, stop=None)
    assert analyzer.tokens("The Running dogs") == ["the", "running", "dogs"]


def test_standard_stop_words_are_removed() -> None:
    assert "the" in ENGLISH_STOP_WORDS
    assert default_analyzer().tokens("the and of to is") == []


def test_possessives_and_apostrophes() -> None:
    assert Analyzer(stem=None).tokens("John's dog don't bark’s") == ["john", "dog", "dont", "bark"]


def test_underscore_separates_words() -> None:
    assert Analyzer(stem=None).tokens("snake_case file_name") == ["snake", "case", "file", "name"]


def test_chinese_is_segmented_into_words_and_bigrams() -> None:
    tokens = default_analyzer().tokens("知识库管理系统支持中文检索")
    assert "知识库" in tokens  # jieba word
    assert "知识" in tokens and "检索" in tokens
    assert "识库" in tokens  # character bigram


def test_chinese_modes() -> None:
    text = "知识库管理系统"
    jieba_only = Analyzer(cjk="jieba").tokens(text)
    assert "知识库" in jieba_only and "识库" not in jieba_only
    assert Analyzer(cjk="bigram").tokens(text) == ["知识", "识库", "库管", "管理", "理系", "系统"]
    assert Analyzer(cjk="bigram").tokens("中") == ["中"]


def test_mixed_chinese_and_english() -> None:
    tokens = default_analyzer().tokens("使用Python构建知识库 with BM25 search")
    assert {"python", "知识库", "bm25", "search", "构建"} <= set(tokens)


def test_full_width_characters_are_normalised() -> None:
    analyzer = default_analyzer()
    full_width = "ＫＮＯＷＬＥＤＧＥ　Ｂａｓｅ１２３，ｔｅｓｔ！"
    assert analyzer.tokens(full_width) == analyzer.tokens("knowledge base123, test!")
    assert analyzer.tokens("知识库，检索。") == analyzer.tokens("知识库,检索.")


def test_japanese_and_korean_use_bigrams() -> None:
    tokens = default_analyzer().tokens("カタカナ 한국어")
    assert tokens == ["カタ", "タカ", "カナ", "한국", "국어"]


@pytest.mark.parametrize("text", ["", "   ", "!!! ... ，。", "\n\t"])
def test_no_tokens_from_empty_or_punctuation(text: str) -> None:
    assert default_analyzer().tokens(text) == []


def test_name_round_trip_for_every_option() -> None:
    for stem, stop, cjk in itertools.product(("en", None, "french"), ("en", None), ("jieba", "bigram", "jieba+bigram")):
        analyzer = Analyzer(stem=stem, stop=stop, cjk=cjk)
        assert analyzer_from_name(analyzer.name) == analyzer
    assert default_analyzer().name == "multilingual-v1:stem=en:stop=en:cjk=jieba+bigram"


@pytest.mark.parametrize(
    "name",
    [
        "whitespace",
        "multilingual-v1:stem=en:stop=en",
        "multilingual-v1:stem=klingon:stop=en:cjk=jieba",
        "multilingual-v1:stem=en:stop=en:cjk=trigram",
        "multilingual-v1:stem=en:stop=xx:cjk=jieba",
        "multilingual-v1:stem=en:stop=en:cjk=jieba:extra=1",
    ],
)
def test_bad_names_are_rejected_with_the_accepted_values(name: str) -> None:
    with pytest.raises(InvalidArgument) as excinfo:
        analyzer_from_name(name)
    assert excinfo.value.code == "INVALID_ARGUMENT"


def test_jieba_loads_lazily_quietly_and_once_under_threads() -> None:
    script = textwrap.dedent(
        """
        import sys
        from concurrent.futures import ThreadPoolExecutor
        from kb_core.engines.analysis import default_analyzer
        assert "jieba" not in sys.modules, "jieba must load lazily"
        analyzer = default_analyzer()
        texts = ["知识库管理系统", "全文检索 search engine", "我们使用中文分词"] * 20
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(analyzer.tokens, texts))
        assert results == [analyzer.tokens(t) for t in texts]
        assert "知识库" in results[0]
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == ""
