"""``mcp-sessions gateway --upstream URL``: the session pipeline in front of a Streamable HTTP server anywhere.

``_app`` is the app (``gateway_app``: the pipeline, unchanged, in front of the proxy); ``_proxy`` streams each
request to the upstream and its answer back (httpx), to the replica that holds its conversation (``_replicas``:
affinity, and the transport ids that name a replica without a bearer value in them).
"""
