"""The front ends over the session: the ``kb`` command line, the MCP server, and the one place envelopes
are made. The Streamlit app (``app.py``, ``pages/``) is the other edge, at the repository's top.
"""
