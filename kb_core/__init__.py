"""KB Workbench's domain package. Front ends use :class:`KnowledgeBaseService` and its sessions."""

import logging

from kb_core.errors import KBError
from kb_core.service import KnowledgeBaseService, open_service
from kb_core.session import Session

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = ["KBError", "KnowledgeBaseService", "Session", "open_service"]
