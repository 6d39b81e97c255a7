"""A ``--stdio`` server's process sealed by the OS's tools, each a world of its own.

``_sandbox`` runs it (its uid, its namespaces and their read-only host, root's helpers); ``_cgroups`` bounds it;
``_network`` gives an ``egress`` process a network namespace of its own and the kernel's rules for it (nftables);
``_kernel`` is what the gateway holds of the host (locks, the host's uids, descriptors, the user namespaces' filter).
Nothing here imports the ``mcp`` SDK.
"""
