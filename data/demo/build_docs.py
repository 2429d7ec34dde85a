"""Authoring script for the demo corpus (run by hand; the app only reads the files it writes).

    python data/demo/build_docs.py        # writes the .txt and .docx files, then .doc via LibreOffice

The .doc files need ``soffice`` (Debian: libreoffice-writer-nogui) at authoring time only; the
committed .doc files are what the app imports.
"""

# ruff: noqa: E501  (Chinese prose counts double width; the lines are document text)
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from docx import Document
from docx.enum.text import WD_BREAK

HERE = Path(__file__).resolve().parent

TXT: dict[str, str] = {
    "kb_workbench_overview.txt": """KB Workbench overview

KB Workbench is a local knowledge-base workbench for retrieval-augmented generation (RAG). You create
knowledge bases, import TXT, DOCX and DOC files, and search them with hybrid search that explains its scores.

Everything runs on your machine: documents are parsed, split into token chunks, embedded with a sentence
embedding model (all-MiniLM-L6-v2 by default) and stored in a FAISS vector index plus a BM25 keyword index.
Nothing is sent to a cloud service unless you configure an embedding endpoint.

Front ends
The same service powers four front ends: this Streamlit app, the `kb` command line, an MCP server for AI
assistants, and Jupyter notebooks for evaluation. Each browser session has its own current knowledge base,
so two analysts can work side by side without disturbing each other.

Why a workbench
Retrieval quality decides answer quality. A workbench lets you see why a chunk ranked where it did, compare
settings side by side, and measure nDCG and recall on your own questions before you ship a RAG pipeline.
""",
    "知识库工作台概述.txt": """知识库工作台概述

KB Workbench（知识库工作台）是一个面向检索增强生成（RAG）的本地知识库工具。你可以创建知识库，导入 TXT、DOCX 和 DOC
文件，并用混合检索来搜索它们，每个结果都会解释自己的得分。

所有处理都在本机完成：文档被解析、按词元切分成块，用句向量模型嵌入，然后存入 FAISS 向量索引和 BM25 关键词索引。
除非你配置了外部嵌入服务，否则不会把任何内容发送到云端。

前端
同一个服务支持四种前端：这个 Streamlit 应用、kb 命令行、供 AI 助手使用的 MCP 服务器，以及用于评估的 Jupyter 笔记本。
每个浏览器会话都有自己的当前知识库，两位分析师可以同时工作、互不干扰。

为什么需要工作台
检索质量决定回答质量。工作台让你看到每个文本块为什么排在这个位置，并排比较不同设置，并在上线之前用自己的问题
测量 nDCG 和召回率。
""",
    "importing_and_chunking.txt": """Importing documents and chunking

Supported formats are plain text (UTF-8, GB18030, UTF-16 and other encodings are detected), Word DOCX and
legacy Word DOC files. Each file is parsed in an isolated worker process with a time limit, so a broken or
hostile file cannot hang the workbench.

Chunking
Parsed text is split into chunks of at most chunk_size tokens (default 512), measured with the embedding
model's own tokenizer. Chunks follow paragraph and sentence boundaries where possible and remember the chapter
(the nearest heading) and the page they come from.

Progress and failures
An import reports progress per file: pending, parsing, embedding, ready or failed. A failed file does not stop
the others; the results table lists each failure with its reason, for example an encrypted document or an
unsupported format.

Re-chunking
You can re-chunk a document with a new chunk size at any time. The original file is kept, so re-chunking does
not need the file again.
""",
    "评估与调参.txt": """评估与调参

检索评估使用 BEIR 格式的数据：corpus.jsonl 保存文档，queries.jsonl 保存问题，qrels.tsv 保存相关性标注。
工作台对每个问题运行关键词检索、语义检索和混合检索，并计算 nDCG@10、Recall@100 和 MRR@10。

权重扫描
混合检索的向量权重可以从 0 扫描到 1。曲线显示 nDCG@10 和 Recall@100 随向量权重的变化，帮助你找到适合自己语料的设置。
找到好的设置后，可以把它保存为知识库的默认值；命令行和 MCP 的检索在没有给出参数时都会使用这些默认值。

逐题分析
逐题结果按得分从低到高排列，最差的问题排在最前面。查看这些问题，往往能发现分词、切块大小或嵌入模型语言覆盖的问题。
例如，英文嵌入模型不理解中文，这时关键词检索比语义检索可靠得多，工作台会给出提示。
""",
}

DOCX: dict[str, list[tuple[str, object]]] = {
    "hybrid_search.docx": [
        ("title", "Hybrid search in KB Workbench"),
        ("h1", "Two signals"),
        ("p", "Semantic search embeds the query and finds chunks whose vectors are closest by cosine similarity. "
              "It understands paraphrases but can miss rare names and codes."),
        ("p", "Keyword search ranks chunks with BM25 over analysed terms: English words are lowercased and stemmed, "
              "Chinese text is segmented with jieba. It is exact about terms but blind to synonyms."),
        ("h1", "Fusion"),
        ("p", "Hybrid search over-fetches candidates from both indexes, normalises each score list and combines "
              "them with weights. The default weights are 0.7 for the vector score and 0.3 for the keyword score."),
        ("table", [["Setting", "Default", "Meaning"],
                   ["vector_weight", "0.7", "share of the normalised semantic score"],
                   ["keyword_weight", "0.3", "share of the normalised BM25 score"],
                   ["jaccard_weight", "tuned", "rerank by query/chunk term overlap"],
                   ["top_k", "5", "number of chunks returned"]]),
        ("break", None),
        ("h1", "When one signal is empty"),
        ("p", "If the embedding model does not cover the query's language, its scores carry no information. "
              "The fusion notices this and leans on the keyword signal, and the workbench shows a warning."),
    ],
    "混合检索.docx": [
        ("title", "知识库工作台中的混合检索"),
        ("h1", "两种信号"),
        ("p", "语义检索把问题转换成向量，按余弦相似度找到最接近的文本块。它能理解同义改写，但可能漏掉罕见的名称和编号。"),
        ("p", "关键词检索用 BM25 给文本块打分：英文单词会转成小写并提取词干，中文用结巴分词切分。它对词语精确，但不认识同义词。"),
        ("h1", "融合"),
        ("p", "混合检索从两个索引各取较多的候选，把各自的分数归一化，再按权重相加。默认向量权重为 0.7，关键词权重为 0.3。"),
        ("table", [["设置", "默认值", "含义"],
                   ["向量权重", "0.7", "归一化语义得分所占比例"],
                   ["关键词权重", "0.3", "归一化 BM25 得分所占比例"],
                   ["Jaccard 权重", "调优", "按问题与文本块的词语重合度重排"],
                   ["top_k", "5", "返回的文本块数量"]]),
        ("break", None),
        ("h1", "当一种信号失效时"),
        ("p", "如果嵌入模型不支持问题所用的语言，它给出的分数就没有信息量。融合会发现这一点并更多地依赖关键词信号，同时工作台会显示警告。"),
    ],
    "evaluation_guide.docx": [
        ("title", "Evaluating retrieval"),
        ("h1", "Datasets"),
        ("p", "Evaluation uses BEIR-format folders: corpus.jsonl, queries.jsonl and qrels.tsv. "
              "Only queries with relevance judgments are run."),
        ("h1", "Metrics"),
        ("table", [["Metric", "What it rewards"],
                   ["nDCG@10", "relevant chunks near the top of the first ten"],
                   ["Recall@100", "finding every relevant document in the first hundred"],
                   ["MRR@10", "the rank of the first relevant hit"]]),
        ("break", None),
        ("h1", "Weight sweep"),
        ("p", "The sweep runs hybrid search with vector weights from 0 to 1 and plots nDCG@10 and Recall@100 "
              "against the weight. Save the best setting as the knowledge base default."),
    ],
}

DOC_SOURCES: dict[str, list[tuple[str, object]]] = {
    "score_breakdown.doc": [
        ("title", "Reading a score breakdown"),
        ("h1", "Every hit explains itself"),
        ("p", "Each search result carries its evidence: the raw cosine similarity, the raw BM25 score, both "
              "normalised values, the rank of the chunk in each list, the weights and each contribution."),
        ("h1", "The formula"),
        ("p", "final_score = (1 - jaccard_weight) x (vector_weight x vector_normalized + keyword_weight x "
              "keyword_normalized) + jaccard_weight x jaccard. The stacked bar chart in the search lab shows the "
              "three contributions; together they add up to the final score."),
        ("table", [["Part", "Example"], ["vector contribution", "0.49"], ["keyword contribution", "0.21"],
                   ["Jaccard contribution", "0.05"], ["final score", "0.75"]]),
        ("h1", "Matched terms"),
        ("p", "Matched terms are the analysed query terms found in the chunk; the search lab highlights them."),
    ],
    "得分解释.doc": [
        ("title", "如何阅读得分明细"),
        ("h1", "每个结果都能解释自己"),
        ("p", "每个检索结果都带有证据：原始余弦相似度、原始 BM25 得分、两者的归一化值、文本块在各自列表中的排名、权重以及每一部分的贡献。"),
        ("h1", "计算公式"),
        ("p", "最终得分 = (1 − Jaccard 权重) ×（向量权重 × 归一化向量得分 + 关键词权重 × 归一化关键词得分）+ Jaccard 权重 × Jaccard 相似度。"
              "检索实验室里的堆叠条形图显示这三部分贡献，它们加起来正好等于最终得分。"),
        ("table", [["部分", "示例"], ["向量贡献", "0.49"], ["关键词贡献", "0.21"], ["Jaccard 贡献", "0.05"], ["最终得分", "0.75"]]),
        ("h1", "匹配词"),
        ("p", "匹配词是在文本块中找到的、经过分析的查询词；检索实验室会把它们高亮显示。"),
    ],
    "知识库管理.doc": [
        ("title", "管理知识库"),
        ("h1", "创建与选择"),
        ("p", "每个知识库有自己的名称、切块大小和嵌入模型。名称不区分大小写，不能重复。创建后需要选择它，才能导入文档和检索。"),
        ("h1", "删除"),
        ("p", "删除知识库会同时删除其中的所有文档和索引。当前正在使用的知识库不能删除，请先选择另一个知识库。"),
        ("h1", "文档管理"),
        ("p", "文档页面列出每个文档的状态、类型、大小、块数和日期，可以预览文本块的章节和页码，也可以用新的切块大小重新切块。"),
    ],
}


def write_docx(path: Path, blocks: list[tuple[str, object]]) -> None:
    document = Document()
    for kind, value in blocks:
        if kind == "title":
            document.add_heading(str(value), level=0)
        elif kind == "h1":
            document.add_heading(str(value), level=1)
        elif kind == "p":
            document.add_paragraph(str(value))
        elif kind == "break":
            document.add_paragraph().add_run().add_break(WD_BREAK.PAGE)
        elif kind == "table":
            rows = value  # type: ignore[assignment]
            table = document.add_table(rows=len(rows), cols=len(rows[0]))
            table.style = "Table Grid"
            for r, row in enumerate(rows):
                for c, text in enumerate(row):
                    table.cell(r, c).text = text
    document.save(str(path))


def main() -> None:
    for name, text in TXT.items():
        (HERE / name).write_text(text, encoding="utf-8")
    for name, blocks in DOCX.items():
        write_docx(HERE / name, blocks)
    soffice = shutil.which("soffice")
    if soffice is None:
        raise SystemExit("soffice (LibreOffice) is needed to write the .doc files")
    with tempfile.TemporaryDirectory() as tmp:
        for name, blocks in DOC_SOURCES.items():
            source = Path(tmp) / (Path(name).stem + ".docx")
            write_docx(source, blocks)
            subprocess.run(
                [soffice, "--headless", "--convert-to", "doc", "--outdir", str(HERE), str(source)],
                check=True, capture_output=True, timeout=120,
            )


if __name__ == "__main__":
    main()
