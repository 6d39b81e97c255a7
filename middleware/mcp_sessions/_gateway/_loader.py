"""The variables no process is given (:func:`loads_code`): checked where ``--pass-env`` is (``_process_flags``) and
where ``--process-env`` is (``auth._users``). A module of its own, importing nothing, so that ``auth/`` imports
nothing of ``sealed/`` nor of the flags, which read their defaults from the configuration (``_config``) that imports
``auth/``'s types: no import of ``_gateway/`` runs back up."""

from __future__ import annotations

from typing import Final

LOADER: Final = frozenset(
    {
        *("GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "NIS_PATH"),
        *("NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR"),
    }
)
"""What glibc drops from a setuid program's environment (its ``UNSECURE_ENVVARS``, less ``TMPDIR``, a directory),
besides every ``LD_*`` and ``MALLOC_*``: the dynamic loader and libc read them, and the helpers that start a
process (``sh``, ``bwrap``, ``setpriv``) run as root. Never given to a process (:func:`loads_code`)."""


def loads_code(name: str) -> bool:
    """Whether the variable ``name`` tells the dynamic loader or libc what to load or read (:data:`LOADER`)."""
    return name.startswith(("LD_", "MALLOC_")) or name in LOADER
