"""The message catalogues: English (the template, every key the code uses) and Simplified Chinese hold the same keys,
every key is translated and keeps its placeholders, and text the library says to people can be said in either."""

from __future__ import annotations

import pickle
import re
import string

import pytest

from kb_core.base.errors import InvalidArgument
from kb_core.base.i18n import Text, keys, language_from_environment, language_of, localize, msg, translate
from kb_core.base.validation import validate_chunk_size, validate_kb_name

CJK = re.compile(r"[\u4e00-\u9fff]")


def placeholders(template: str) -> list[tuple[str, str | None, str | None]]:
    return sorted((name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template) if name)


def test_every_call_passes_a_literal_template() -> None:
    # A template built at run time (an f-string, a variable) cannot be a catalogue key: it would stay English.
    bad = [f"{call.path}:{call.line}" for call in keys.calls() if call.template is None]
    assert not bad, f"t()/msg() need a literal template: {bad}"


def test_both_catalogues_have_exactly_the_keys_the_code_uses() -> None:
    used = keys.keys()
    english = {m.id for m in keys.read(keys.template_path()) if m.id}
    chinese = {m.id for m in keys.read(keys.catalogue_path("zh")) if m.id}
    refresh = "run `python -m kb_core.base.i18n.keys`"
    assert english == used, f"{refresh}: missing {sorted(used - english)[:5]}, stale {sorted(english - used)[:5]}"
    assert chinese == english, f"missing in zh {sorted(english - chinese)[:5]}, stale {sorted(chinese - english)[:5]}"


def test_every_key_is_translated_into_chinese_with_the_same_placeholders() -> None:
    problems = []
    for message in keys.read(keys.catalogue_path("zh")):
        if not message.id:
            continue
        if not message.string or message.fuzzy:
            problems.append(f"untranslated: {message.id!r}")
        elif placeholders(message.id) != placeholders(message.string):
            problems.append(f"placeholders differ: {message.id!r} → {message.string!r}")
        elif re.search(r"[A-Za-z]{3,}", re.sub(r"\{[^}]*\}", "", message.id)) and not CJK.search(message.string):
            problems.append(f"not Chinese: {message.id!r} → {message.string!r}")
    assert not problems, "\n".join(problems[:20])


@pytest.mark.parametrize(
    ("tag", "language"),
    [("zh-CN", "zh"), ("zh_TW.UTF-8", "zh"), ("zh-Hans-CN", "zh"), ("en-US", "en"), ("fr-FR", "en"), ("C", "en"),
     ("", "en"), (None, "en")],
)
def test_the_language_of_a_browser_tag_or_a_locale(tag: str | None, language: str) -> None:
    assert language_of(tag) == language


def test_the_locale_decides_in_gettexts_order() -> None:
    assert language_from_environment({"LANG": "zh_CN.UTF-8"}) == "zh"
    assert language_from_environment({"LANG": "zh_CN.UTF-8", "LC_ALL": "en_US.UTF-8"}) == "en"
    assert language_from_environment({"LANGUAGE": "zh_CN:en", "LANG": "en_US.UTF-8"}) == "zh"
    assert language_from_environment({}) == "en"


def test_text_reads_as_english_and_is_said_in_chinese_at_the_edge() -> None:
    with pytest.raises(InvalidArgument) as raised:
        validate_kb_name("测试/斜杠")
    message = raised.value.message
    # What logs, JSON envelopes and MCP clients get is the English sentence, as before.
    assert message == "kb_name '测试/斜杠' contains '/'; path separators and control characters are not allowed."
    said = localize(message, "zh")
    assert CJK.search(said.replace("测试/斜杠", "")) and "'测试/斜杠'" in said and "'/'" in said
    assert localize(message, "en") == message
    # It survives the process pools and job states that pickle it.
    copy = pickle.loads(pickle.dumps(message))
    assert isinstance(copy, Text) and copy == message and localize(copy, "zh") == said
    with pytest.raises(InvalidArgument) as raised:
        validate_chunk_size(0)
    assert "32" in localize(raised.value.message, "zh") and CJK.search(localize(raised.value.message, "zh"))


def test_a_missing_translation_or_a_plain_string_stays_english() -> None:
    assert translate("zh", "No such sentence in the catalogue, {n} times.", n=3) == (
        "No such sentence in the catalogue, 3 times."
    )
    assert localize("plain", "zh") == "plain"
    assert localize(msg("The operation failed."), "zh") == "操作失败。"
