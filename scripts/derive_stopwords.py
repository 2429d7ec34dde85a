"""Derive the Chinese query stop words of kb_core/engines/stopwords.py from their sources (issue #25).

Rule: an entry of the stopwords-iso Chinese list (PyPI ``stopwordsiso``, MIT) is a stop word when jieba's own
dictionary (the one our analyzer segments with) tags it as a closed-class function word — conjunction (c), adverb
(d), interjection (e), localizer (f), suffix (k), onomatopoeia (o), preposition (p), measure word (q), pronoun (r),
auxiliary (u, ud, ug, uj, ul, uv, uz) or modal particle (y) — or is one of the two function verbs 是 (copula) and
有 (existential), which the later ICTCLAS tag set gives their own tags (vshi, vyou) and jieba's older set lumps
with content verbs. The list alone holds content words (人 person, 冲 to brew, 大 big, 年 year); the rule drops them.

    .venv/bin/python scripts/derive_stopwords.py            # print the list
    .venv/bin/python scripts/derive_stopwords.py --check    # exit 1 if the module's list differs

tests/test_trusted_results.py runs the check, so the shipped list and the rule cannot drift apart.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CLOSED_CLASS_TAGS = frozenset(
    {"c", "d", "e", "f", "k", "o", "p", "q", "r", "u", "ud", "ug", "uj", "ul", "uv", "uz", "y"}
)
FUNCTION_VERBS = frozenset({"是", "有"})


def jieba_tags() -> dict[str, str]:
    import jieba

    tags: dict[str, str] = {}
    path = Path(jieba.__file__).with_name("dict.txt")
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            parts = line.split()
            if len(parts) >= 3:
                tags[parts[0]] = parts[2]
    return tags


def derive_chinese() -> list[str]:
    import stopwordsiso

    tags = jieba_tags()
    source = stopwordsiso.stopwords("zh")
    return sorted(w for w in source if w in FUNCTION_VERBS or tags.get(w) in CLOSED_CLASS_TAGS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with kb_core.engines.stopwords")
    args = parser.parse_args()
    derived = derive_chinese()
    if args.check:
        from kb_core.engines.stopwords import CHINESE_STOP_WORDS

        if set(derived) != CHINESE_STOP_WORDS:
            print(f"differs: +{sorted(set(derived) - CHINESE_STOP_WORDS)} -{sorted(CHINESE_STOP_WORDS - set(derived))}")
            return 1
        print(f"kb_core.engines.stopwords.CHINESE_STOP_WORDS matches the rule ({len(derived)} words)")
        return 0
    print(" ".join(derived))
    return 0


if __name__ == "__main__":
    sys.exit(main())
