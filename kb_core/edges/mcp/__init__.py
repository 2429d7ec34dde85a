"""The MCP server of KB Workbench (``kb mcp``).

- :mod:`.server`: the FastMCP server, its ``tools/call`` dispatch and sessions; :mod:`.transports`: stdio and
  HTTP entry points; :mod:`.http_security`: Host/Origin checks.
- :mod:`.tools`: the tools, module-level functions whose docstrings are their descriptions;
  :mod:`.models`: their output models; :mod:`.results`: envelopes to tool results (each tool calls one
  operation of :class:`kb_core.session.operations.Operations`, made an envelope by :mod:`kb_core.edges.envelopes`).
- :mod:`.access`: the one table of who may call what over HTTP; :mod:`.paths`: path confinement;
  :mod:`.screening`: arguments refused before the SDK parses them; :mod:`.context`: a tool call run on the
  caller's session; :mod:`.http_limits`: timeouts and connection caps; :mod:`.sdk`: the one place that uses the
  SDK's private parts.
"""
