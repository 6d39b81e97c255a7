"""``mcp-sessions gateway --stdio``: a stdio MCP server's processes behind the session pipeline.

``_server`` is the app (``stdio_gateway_app``, its MCP server and ASGI layers); ``_table`` decides which process a
request reaches (``Table``, the one owner of the conversations, its decisions synchronous, its I/O after them),
beside its parts: ``_pool`` (the processes, made by a factory), ``_admission`` (the limits), ``_lifetimes`` (each
process run to its end), and the words they share (``_models``: ``Key``, ``Caller``, ``Owner``, ``EndReason``);
``_relay`` is what a process's messages do for its client; ``_child`` one process and its MCP link; ``_status`` the
operator's and each user's view.
Nothing is imported here: the ``mcp`` SDK loads with ``_server``, when the gateway is built with ``--stdio``.
"""
