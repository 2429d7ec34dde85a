"""Query stop words (issue #25): function words that carry no topic, left out of keyword queries.

English (word runs): the Snowball English stop list by Martin Porter, the list written to go with the Snowball
English stemmer our analyzer uses (https://snowballstem.org/algorithms/english/stop.txt, BSD-3-Clause: Copyright
(c) 2001 Dr Martin Porter, (c) 2002 Richard Boulton), without its compound forms (``we'll``, ``she'll``, ``i'll``
…): the analyzer removes apostrophes, which would turn them into the content words well, shell and ill. It holds
pronouns, auxiliaries, articles, prepositions and conjunctions only; the large lists (stopwords-iso's 1,298 English
words, the ``stop-words`` package's 1,333) also hold content words such as information, research, system, test.

Chinese (Han runs): the entries of the stopwords-iso Chinese list (PyPI ``stopwordsiso`` 0.7.1, MIT) that jieba's
dictionary tags as closed-class function words, plus the function verbs 是 and 有; the rule and the code that
applies it are in ``scripts/derive_stopwords.py`` (``--check`` compares it with this list; a test runs it).

The lists are fixed here rather than read from a package at run time so that an update of a package can never
change which query terms a knowledge base is searched with.
"""

from __future__ import annotations

__all__ = ["CHINESE_STOP_WORDS", "ENGLISH_STOP_WORDS"]

ENGLISH_STOP_WORDS: frozenset[str] = frozenset(
    [
        "i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours", "yourself",
        "yourselves", "he", "him", "his", "himself", "she", "her", "hers", "herself", "it", "its", "itself", "they",
        "them", "their", "theirs", "themselves", "what", "which", "who", "whom", "this", "that", "these", "those",
        "am", "is", "are", "was", "were", "be", "been", "being", "have", "has", "had", "having", "do", "does",
        "did", "doing", "would", "should", "could", "ought", "cannot", "a", "an", "the", "and", "but", "if", "or",
        "because", "as", "until", "while", "of", "at", "by", "for", "with", "about", "against", "between", "into",
        "through", "during", "before", "after", "above", "below", "to", "from", "up", "down", "in", "out", "on",
        "off", "over", "under", "again", "further", "then", "once", "here", "there", "when", "where", "why", "how",
        "all", "any", "both", "each", "few", "more", "most", "other", "some", "such", "no", "nor", "not", "only",
        "own", "same", "so", "than", "too", "very",
    ]
)

CHINESE_STOP_WORDS: frozenset[str] = frozenset(
    [
        "一切", "一旦", "一来", "一样", "一转眼", "上", "上下", "下", "不", "不仅",
        "不但", "不光", "不如", "不尽", "不怕", "不惟", "不是", "不然", "不独", "不管",
        "不至于", "不若", "不论", "不过", "与", "与其", "与其说", "与此同时", "且说",
        "个", "中", "为", "为了", "为什么", "为何", "为此", "为着", "乃至", "乃至于",
        "么", "之", "之一", "之所以", "之类", "也", "也好", "也罢", "了", "于",
        "于是", "于是乎", "些", "亦", "什", "什么", "什么样", "仍旧", "从", "从此",
        "从而", "他", "他人", "他们", "以", "以上", "以为", "以便", "以免", "以及",
        "以期", "以来", "以至", "以至于", "以致", "们", "任", "任何", "似的", "但",
        "但是", "何", "何以", "何况", "何处", "何时", "你", "你们", "依", "依据",
        "依照", "俺", "俺们", "倘", "倘使", "倘或", "倘然", "倘若", "假使", "假如",
        "假若", "兮", "共", "关于", "其", "其一", "其中", "其二", "其他", "其余",
        "其它", "其次", "再", "再其次", "再则", "再者", "再者说", "再说", "况且", "几时",
        "凡", "凡是", "凭", "凭借", "分别", "则", "则甚", "别", "别人", "别处",
        "别的", "别管", "别说", "前后", "前此", "加之", "即令", "即使", "即便", "即如",
        "即或", "即若", "却", "又", "及", "及其", "及至", "反之", "反而", "反过来",
        "另", "另一方面", "另外", "只", "只当", "只怕", "只是", "只有", "只要", "叮咚",
        "可以", "可是", "各", "各个", "各位", "各种", "各自", "同", "同时", "后",
        "向", "向着", "吗", "否则", "吧", "吧哒", "吱", "呀", "呃", "呗", "呜",
        "呜呼", "呢", "呵", "呸", "呼哧", "咋", "和", "咚", "咦", "咱", "咱们",
        "哇", "哈哈", "哉", "哎", "哎呀", "哎哟", "哩", "哪", "哪个", "哪些", "哪儿",
        "哪天", "哪怕", "哪样", "哪边", "哪里", "哼唷", "啥", "啦", "嗡嗡", "嗬",
        "嗯", "嗳", "嘎", "嘘", "嘛", "嘿", "嘿嘿", "因", "因为", "因此", "因着",
        "因而", "固然", "在", "地", "基于", "多么", "她", "她们", "如上所述", "如何",
        "如其", "如同", "如是", "如果", "如此", "如若", "始而", "宁愿", "它", "它们",
        "对", "对于", "将", "尔后", "尚且", "就", "就是", "就是说", "就要", "尽管",
        "岂但", "己", "已", "并", "并且", "庶乎", "庶几", "当然", "当着", "彼",
        "彼时", "彼此", "得", "怎", "怎么", "怎么样", "怎奈", "怎样", "总之", "总的来看",
        "总的来说", "总而言之", "恰恰相反", "惟其", "慢说", "我", "我们", "或", "或则",
        "或是", "或曰", "或者", "所", "所以", "才", "把", "抑或", "按", "按照",
        "换句话说", "换言之", "据", "据此", "接着", "故此", "故而", "旁人", "无论", "既",
        "既是", "既然", "是", "更", "曾", "替", "最", "有", "有些", "有时", "朝着",
        "本", "本人", "本地", "本着", "本身", "来说", "极了", "果然", "果真", "某",
        "某个", "某些", "某某", "根据", "欤", "正是", "此地", "此处", "此外", "此时",
        "此次", "每当", "比", "沿", "沿着", "然则", "然后", "然而", "甚且", "甚么",
        "甚或", "甚而", "甚至", "甚至于", "用", "由", "由于", "由是", "由此", "由此可见",
        "的", "的确", "的话", "着", "矣哉", "竟而", "等", "等等", "紧接着", "纵使",
        "纵然", "经过", "给", "继之", "继而", "综上所述", "罢了", "者", "而", "而且",
        "而况", "而后", "而外", "而已", "而是", "而言", "自", "自个儿", "自从", "自家",
        "自己", "自打", "自身", "至", "至于", "至今", "般的", "若", "若是", "若果",
        "若非", "虽则", "虽然", "虽说", "被", "要不是", "要不然", "要么", "要是", "设若",
        "诚然", "该", "诸", "谁", "趁着", "越是", "跟", "较之", "边", "过", "还",
        "还是", "还要", "这", "这个", "这么", "这么些", "这么样", "这么点儿", "这些",
        "这会儿", "这儿", "这时", "这样", "这次", "这般", "这边", "这里", "进而", "逐步",
        "通过", "那", "那个", "那么", "那么些", "那么样", "那些", "那会儿", "那儿",
        "那时", "那样", "那般", "那边", "那里", "都", "鄙人", "鉴于", "针对", "除",
        "除了", "除外", "除此之外", "除非", "随后", "随时", "随着", "非但", "非独", "顺",
        "顺着", "首先",
    ]
)
