"""Document parsers: plain text (any common encoding), DOCX and Word 97-2003 .doc into text blocks.

``parse_file`` runs the parser in a worker process with a timeout; ``parse_file_inprocess`` does the
same work in the calling process for callers that isolate parsing themselves.
"""

from kb_core.engines.parsing.base import SUPPORTED_TYPES, ParsedDocument, ParseLimits, TextBlock
from kb_core.engines.parsing.detect import detect_file_type
from kb_core.engines.parsing.inprocess import parse_file_inprocess
from kb_core.engines.parsing.isolation import ParserPool, parse_and_chunk_file, parse_and_chunk_files, parse_file

__all__ = [
    "SUPPORTED_TYPES",
    "ParseLimits",
    "ParsedDocument",
    "ParserPool",
    "TextBlock",
    "detect_file_type",
    "parse_and_chunk_file",
    "parse_and_chunk_files",
    "parse_file",
    "parse_file_inprocess",
]
