"""MCP search tools: search and explain_search (current KB), rag_search (keywords), search_knowledge_base
(every visible KB)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.fastmcp import Context
from mcp.types import CallToolResult
from pydantic import Field

from kb_core.edges.mcp.context import call
from kb_core.edges.mcp.models import (
    JACCARD_WEIGHT,
    KEYWORD_WEIGHT,
    LANGUAGE_GUARD,
    MIN_SCORE,
    VECTOR_WEIGHT,
    WEIGHTING,
    Fusion,
    HitList,
    LibraryMode,
    RagEnvelope,
    SearchExplanation,
    SearchMode,
    SearchResult,
    ToolEnvelope,
    Weighting,
)
from kb_core.edges.mcp.results import hits_text
from kb_core.features.results import SearchRequest
from kb_core.session.operations import Operations

# The search settings search and explain_search both take, as clients read them.
ModeArg = Annotated[SearchMode | None, Field(description="default from settings, usually hybrid")]
VectorWeightArg = Annotated[float | None, Field(ge=0, le=1, description=VECTOR_WEIGHT)]
KeywordWeightArg = Annotated[float | None, Field(ge=0, le=1, description=KEYWORD_WEIGHT)]
WeightingArg = Annotated[Weighting | None, Field(description=WEIGHTING)]
LanguageGuardArg = Annotated[bool | None, Field(description=LANGUAGE_GUARD)]
FusionArg = Annotated[Fusion | None, Field(description="weighted (default) or rrf")]
JaccardWeightArg = Annotated[float | None, Field(ge=0, le=1, description=JACCARD_WEIGHT)]
MinScoreArg = Annotated[float | None, Field(ge=0, le=1, description=MIN_SCORE)]


async def search(
    query: Annotated[str, Field(description="query text")],
    ctx: Context,
    top_k: Annotated[int | None, Field(description="number of results; default from settings, usually 5")] = None,
    expand_graph: Annotated[
        bool, Field(description="also return documents related to bundle hits by graph edges")
    ] = False,
    mode: ModeArg = None,
    vector_weight: VectorWeightArg = None,
    keyword_weight: KeywordWeightArg = None,
    weighting: WeightingArg = None,
    language_guard: LanguageGuardArg = None,
    fusion: FusionArg = None,
    jaccard_weight: JaccardWeightArg = None,
    min_score: MinScoreArg = None,
) -> Annotated[CallToolResult, ToolEnvelope[SearchResult]]:
    r"""Perform hybrid search in the currently selected knowledge base. Combines keyword search (BM25) and vector
    search with a weighted sum (vector weight 0.7, keyword weight 0.3 unless the knowledge base saved other defaults;
    the weights given are the weights used) and returns up to top_k chunks. No reranking by default: the Jaccard
    term-overlap rerank has weight 0 unless jaccard_weight (or the knowledge base's default) sets one. Only chunks
    that some signal supports are returned — a query term (stop words such as "the", "how", 的, 了 are left out of
    the keyword query) or a cosine above the model's semantic floor (what unrelated text scores for that model) — so
    there may be fewer than top_k. Every score lies in [0, 1], higher is better, in every mode and on every model:
    vector part = the cosine on the model's measured scale (what unrelated text scores → 0, a near-identical text → 1);
    keyword part = 1 − exp(−BM25 / BM25 of a chunk holding each query term once); hybrid = the weighted sum.

    Parameters:
    - query: Query text (required)
    - top_k: Number of results to return (optional, default from the knowledge base's settings, usually 5)
    - mode: hybrid | semantic | keyword (optional)
    - vector_weight, keyword_weight: 0-1 (optional; one alone sets the other to its complement)
    - weighting: fixed (the weights as given, default) | auto (scaled by how well each signal separates its top hits
    for this query)
    - language_guard: true (default) gives the vector signal weight 0 when the embedding model does not cover the
    query's language, with a warning; false keeps the requested weights
    - fusion: weighted (default) | rrf
    - jaccard_weight: 0-1, weight of the query/chunk term-overlap rerank (default 0: none)
    - min_score: 0-1, hide hits whose final score is below it (default 0); data.below_min_score counts them
    - expand_graph: follow knowledge-bundle edges (optional, default false): each hit on a bundle document is followed
    by the first chunk of every document related to it by an edge, marked expanded=true with
    breakdown.graph_expansion.

    data: chunks (each: id, doc_id, content, tokens, chunk_index, doc_name, score, matched_terms: the query's words it
    holds, snippet: the passage around them, passage: its place and the words' spans, and a score breakdown that
    recomputes it), count, settings, weights (requested, used, and what auto weighting would use), warnings,
    query_terms (terms searched, the query's words, stop words left out, only_stop_words, support: Chinese character
    pairs that are no word of the query, which add to a chunk holding a word and find none alone; a hit's
    support_terms are those it holds), semantic_floor, semantic_scale, below_min_score, without_evidence.

    在当前选中的知识库中进行混合检索。结合关键词检索（BM25）和向量检索，按加权和合并结果（向量权重 0.7，关键词权重 0.3，
    除非知识库保存了其他默认值；给定的权重就是实际使用的权重），返回最多 top_k 个结果。默认不重排序：Jaccard 词重叠重排
    的权重为 0，除非 jaccard_weight（或知识库默认值）设置了权重。只返回有信号支持的片段——包含查询词（"the"、"how"、
    的、了 等停用词不参与关键词检索），或余弦相似度高于该模型的语义下限（无关文本在该模型下的得分水平）——因此结果可能少
    于 top_k。所有模式、所有模型下分数都在 [0, 1] 之间，越高越好：向量部分 = 余弦相似度在该模型实测尺度上的
    位置（无关文本为 0，几乎相同的文本为 1）；关键词部分 = 1 − exp(−BM25 / 每个查询词各出现一次的 chunk 的
    BM25)；混合分数为二者的加权和。

    参数说明：
    - query：查询文本（必填）
    - top_k：返回数量（可选，默认取知识库的设置，通常为 5）
    - mode：hybrid | semantic | keyword（可选）
    - vector_weight、keyword_weight：0-1（可选；只给一个时另一个取其补数）
    - weighting：fixed（按给定权重，默认）| auto（按每个信号对本次查询的区分度调整权重）
    - language_guard：true（默认）时，若向量模型不支持查询的语言，则向量信号权重为 0 并给出警告；false 时保持请求的权
    重
    - fusion：weighted（默认）| rrf
    - jaccard_weight：0-1，查询与片段词重叠重排的权重（默认 0：不重排）
    - min_score：0-1，不显示最终得分低于它的结果（默认 0）；data.below_min_score 给出被隐藏的数量
    - expand_graph：沿知识包的边扩展（可选，默认 false）：每个命中知识包文档的结果之后，附上通过边与之相关的每个文档的
    第一个 chunk，标记为 expanded=true，并在 breakdown.graph_expansion 中说明。

    返回值 data：chunks（每个包含 id、doc_id、content、tokens、chunk_index、doc_name、score、matched_terms：片段包含的
    查询词、snippet：这些词周围的段落、passage：段落位置及词的位置，以及可复算分数的分数明细）、count、settings、
    weights（请求的权重、实际使用的权重以及 auto 会使用的权重）、warnings、query_terms（检索用的词、查询的词语、去掉的
    停用词、only_stop_words，以及 support：不构成查询词语的中文字对，只为已包含查询词的片段加分，不单独召回；每个结果的
    support_terms 是它包含的这类字对）、semantic_floor、semantic_scale、below_min_score、without_evidence。
    """
    return await call(
        ctx,
        Operations.search,
        SearchRequest(
            query,
            top_k=top_k,
            expand_graph=expand_graph,
            mode=mode,
            vector_weight=vector_weight,
            keyword_weight=keyword_weight,
            weighting=weighting,
            language_guard=language_guard,
            fusion=fusion,
            jaccard_weight=jaccard_weight,
            min_score=min_score,
        ),
    )


async def explain_search(
    query: Annotated[str, Field(description="the query text")],
    chunk_id: Annotated[str, Field(description="a chunk id (chk_...) from a search hit")],
    ctx: Context,
    mode: ModeArg = None,
    vector_weight: VectorWeightArg = None,
    keyword_weight: KeywordWeightArg = None,
    weighting: WeightingArg = None,
    language_guard: LanguageGuardArg = None,
    fusion: FusionArg = None,
) -> Annotated[CallToolResult, ToolEnvelope[SearchExplanation]]:
    r"""Explain why a chunk ranks where it does for a query: its rank among the hits (searched up to 1,000 deep with
    the knowledge base's settings, or the ones given), its score on the 0-1 scale and every step of it (raw cosine,
    raw BM25 and the query's reference BM25, each normalised value, the weights used and asked, matched terms, notes
    such as the language guard), and the hit just above it. A chunk that is not among the hits (ranked too low, or
    dropped as a near-duplicate of a better-ranked chunk) is explained from its exact scores.

    Parameters:
    - query: the query text (required)
    - chunk_id: a chunk id (chk_...) from a search hit (required)
    - mode, vector_weight, keyword_weight, weighting, language_guard, fusion: as in search (optional)

    data: rank, hits, candidate_position, candidates, score, matched_terms, support_terms (Chinese character pairs
    that are no word of the query and add to its BM25), breakdown, above, settings, explanation (the steps as
    sentences; also the text content).

    解释某个 chunk 在某个查询下为什么排在这个位置：它在命中结果中的排名（按知识库的设置或给定的设置，最多检索 1000 条
    ）、它在 0-1 分数尺度上的得分及每一步计算（原始余弦相似度、原始 BM25 及该查询的参考 BM25、各自的归一化值、实际使用
    和请求的权重、匹配的词、语言保护等说明），以及排在它前面的那个结果。不在命中结果中的 chunk（排名太低，或作为排名更
    高的 chunk 的近似重复被去掉）按其精确分数解释。

    参数说明：
    - query：查询文本（必填）
    - chunk_id：检索结果中的 chunk id（chk_...，必填）
    - mode、vector_weight、keyword_weight、weighting、language_guard、fusion：与 search 相同（可选）

    返回值 data：rank、hits、candidate_position、candidates、score、matched_terms、support_terms（不构成查询词语、为其
    BM25 加分的中文二元词）、breakdown、above、settings、explanation（逐句说明，也是文本内容）。
    """
    return await call(
        ctx,
        Operations.explain_search,
        SearchRequest(
            query,
            mode=mode,
            vector_weight=vector_weight,
            keyword_weight=keyword_weight,
            weighting=weighting,
            language_guard=language_guard,
            fusion=fusion,
        ),
        chunk_id,
        text=lambda e: e["message"],
    )


async def rag_search(
    keywords: Annotated[
        list[str],
        Field(description="keywords, e.g. ['青龙', '坎宫', '用神']", json_schema_extra={"minItems": 1}),
    ],
    ctx: Context,
    top_k: Annotated[int, Field(ge=1, le=10, description="number of results, 1-10")] = 5,
    timeout: Annotated[float, Field(ge=0.1, le=10.0, description="seconds before degrading to no results")] = 3.0,
    min_score: MinScoreArg = None,
) -> Annotated[CallToolResult, RagEnvelope]:
    r"""Search the currently selected knowledge base for passages related to several keywords at once; passages related
    to all keywords rank first. Only passages that hold at least one keyword (stop words such as 的 or "the" aside), or
whose meaning clears the model's semantic floor, are returned: fewer than top_k when fewer match. Degrades instead of
failing: after the timeout, or when the search fails (e.g. the
    embedding endpoint is down or refuses the API key), it returns no chunks, degraded=true and the reason in
    degraded_reason and the message: what the embedding endpoint did (its HTTP status, e.g. "answered HTTP 500
    (Internal Server Error)", or that the connection could not be made), or that the timeout passed.

    Parameters:
    - keywords: list of keywords (required, at least one), e.g. ['青龙', '坎宫', '用神']
    - top_k: number of results, 1-10, default 5
    - timeout: seconds, 0.1-10.0, default 3.0
    - min_score: 0-1, leave out passages whose score is below it (default from settings, usually 0)

    Returns success, chunks (chunk_text, metadata {source, chapter, page}, score on the 0-1 scale of search,
    matched_keywords: how many of the keywords the passage holds), total_results, degraded, degraded_reason.

    在当前选中的知识库中按多个关键词检索相关片段，与所有关键词都相关的片段排在最前。只返回至少包含一个关键词（的、"the"
    等停用词除外）或语义相似度高于模型语义下限的片段：匹配的片段不足 top_k 时返回的更少。超时或检索失败（例如向量化服务
    不可用或拒绝了 API Key）时自动降级而不报错：返回空结果和 degraded=true，并在 degraded_reason 和 message 中说明原因
    （向量化服务返回的 HTTP 状态码，例如 "answered HTTP 500 (Internal Server Error)"，或无法建立连接，或已超时），
    不影响主流程。

    参数说明：
    - keywords：检索关键词列表（必填，至少一个），例如 ['青龙', '坎宫', '用神']
    - top_k：返回结果数量，1-10，默认 5
    - timeout：超时时间（秒），0.1-10.0，默认 3.0
    - min_score：0-1，不返回得分低于它的片段（默认取知识库的设置，通常为 0）

    返回值：success、chunks（chunk_text、metadata {source, chapter, page}、score，与 search 相同的 0-1 分数，
    matched_keywords：片段包含的关键词个数）、total_results、degraded、degraded_reason。
    """
    return await call(ctx, Operations.rag_search, keywords, top_k=top_k, timeout=timeout, min_score=min_score)


async def search_knowledge_base(
    query: Annotated[str, Field(description="natural-language query to search for")],
    ctx: Context,
    limit: Annotated[int, Field(ge=1, le=20, description="maximum number of chunks, 1-20")] = 8,
    mode: Annotated[LibraryMode, Field(description="search mode")] = "hybrid",
    expand_graph: Annotated[
        bool, Field(description="also list documents related to bundle hits by graph edges")
    ] = False,
    min_score: MinScoreArg = None,
) -> Annotated[CallToolResult, ToolEnvelope[HitList]]:
    r"""Semantic, keyword, or hybrid search over every knowledge base this session can see (the user's library).
    Returns the top matching chunks as a numbered list '1. (0.84) <document title>' with a quoted snippet; the score
    lies in [0, 1] (higher is better; the same scale in every mode and knowledge base, so hits of several knowledge
    bases are merged by it); structured content has the same hits with ids that get_item accepts and explain_search
    explains.

    Parameters:
    - query: natural-language query (required)
    - limit: maximum number of chunks, 1-20, default 8
    - mode: semantic | keyword | hybrid, default hybrid.
    - min_score: 0-1, hide hits whose score is below it (default each knowledge base's saved value, usually 0).

    Only chunks with evidence are listed (a query term, stop words aside, or a cosine above the model's semantic
    floor), so there may be fewer than limit. A hit whose text is the same as a better-ranked hit from another
    knowledge base (a knowledge base and its imported copy) is dropped, and the text says how many were.

    Modes: semantic = vector similarity, best when the answer paraphrases the source; keyword = full-text (BM25)
    search, best for exact strings, names, API names and error codes; hybrid = 70% semantic + 30% keyword (or the
    weights a knowledge base saved as its default), catches both.
    - expand_graph: optional, default false; also list the documents related by knowledge-bundle edges to each hit on
    a bundle document, numbered after the hits and marked '[via EDGE_TYPE ...]' (structured: expanded=true, via).

    If the embedding endpoint of a knowledge base fails, the others are still searched and the failure is reported as
    a warning (after the hits in the text; warnings and failed_knowledge_bases in structured content); when no
    knowledge base can be searched the call fails with -32603 (keyword mode needs no embeddings).

    对本会话可见的所有知识库（用户的资料库）进行语义、关键词或混合检索。以编号列表 '1. (0.84) <文档标题>' 加引用片段的
    形式返回最匹配的 chunks；分数在 [0, 1] 之间（越高越好；各模式和各知识库使用同一尺度，因此多个知识库的结果按分数合
    并）；结构化内容包含同样的命中结果，其 id 可传给 get_item 和 explain_search。

    参数说明：
    - query：自然语言查询（必填）
    - limit：返回 chunk 的最大数量，1-20，默认 8
    - mode：semantic | keyword | hybrid，默认 hybrid
    - min_score：0-1，不显示得分低于它的结果（默认取各知识库保存的设置，通常为 0）

    只列出有信号支持的片段（包含查询词，停用词除外；或余弦相似度高于模型的语义下限），因此结果可能少于 limit。与另一个
    知识库中排名更高的结果文本相同的结果（例如知识库与其导入的副本）会被去掉，文本中会说明去掉了几个。

    模式说明：semantic = 向量相似度，适合答案是对原文的转述时；keyword = 全文（BM25）检索，适合精确字符串、名称、
    API 名称和错误码；hybrid = 70% 语义 + 30% 关键词（或知识库保存的默认权重），两者兼顾。
    - expand_graph：可选，默认 false；对命中知识包文档的结果，同时列出通过知识包的边与之相关的文档，编号排在命中结果之
    后，并标记 '[via 边类型 ...]'（结构化内容中为 expanded=true 和 via）。

    某个知识库的向量化服务失败时，其他知识库照常检索，失败作为警告列出（文本中在命中结果之后；结构化内容中
    为 warnings 和 failed_knowledge_bases）；没有任何知识库能够检索时返回 -32603 错误（keyword 模式不需要向量化）。
    """
    return await call(
        ctx, Operations.search_knowledge_base, query, limit, mode, expand_graph, min_score, text=hits_text
    )
