"""The system calls a container may not make, as the seccomp tests try them (tests/unit/test_seccomp.py without the
gateway, tests/e2e/test_gateway_stdio_seccomp.py through it): each with arguments that the kernel alone answers
otherwise than ``EPERM`` for a process with no capability (a bad pointer, a bad descriptor, a call that succeeds), so
that only a filter makes them ``EPERM``; and :data:`TRY`, the function that makes them (the hostile server's tool)."""

from __future__ import annotations

import platform
from typing import Final

# Each call's number on x86_64 and on aarch64, then its arguments (a str is passed as bytes).
_NUMBERS: Final = {
    "add_key": (248, 217, "user", "mcp-sessions-test", "x", 1, -2),  # into its process keyring: made
    "request_key": (249, 218, "user", "mcp-sessions-absent", 0, 0),  # ENOKEY
    "keyctl": (250, 219, 0, -4, 0),  # KEYCTL_GET_KEYRING_ID of its uid's keyring: made
    "bpf": (321, 280, 0, 0, 1 << 20),  # an attribute past a page: E2BIG
    "perf_event_open": (298, 241, 0, 0, -1, -1, 0),  # EFAULT
    "userfaultfd": (323, 282, 1),  # UFFD_USER_MODE_ONLY: made
    "mount": (165, 40, 0, 1, 1, 0, 0),  # EFAULT
    "umount2": (166, 39, 0, 0x80000000),  # an unknown flag: EINVAL
    "unshare": (272, 97, 0x10000000),  # CLONE_NEWUSER: made
    "setns": (308, 268, -1, 0),  # EBADF
    "clock_settime": (227, 112, 0, 0),  # EFAULT
    "personality": (135, 92, 0x0400000),  # READ_IMPLIES_EXEC: made
    "clone3": (435, 435, 0, 0),  # EINVAL
    "io_uring_setup": (425, 425, 1, 0),  # EFAULT (or EPERM where the host's kernel.io_uring_disabled is 2)
}
_ARCH: Final = {"x86_64": 0, "aarch64": 1}.get(platform.machine())
CALLS: Final = {name: [numbers[_ARCH], *numbers[2:]] for name, numbers in _NUMBERS.items() if _ARCH is not None}
"""Each call this host's tests make: its number, then its arguments."""
REFUSED: Final = {
    name: "denied: Function not implemented" if name == "clone3" else "denied: Operation not permitted"
    for name in CALLS
}
"""How a process under the filter is answered: clone3 ``ENOSYS`` (the C library falls back to clone), else ``EPERM``."""
TRY: Final = r"""
def syscalls(calls):
    libc, said = ctypes.CDLL(None, use_errno=True), {}
    for name, (number, *args) in calls.items():
        passed = [argument.encode() if isinstance(argument, str) else ctypes.c_long(argument) for argument in args]
        made = libc.syscall(ctypes.c_long(number), *passed)
        said[name] = "made" if made != -1 else f"denied: {os.strerror(ctypes.get_errno())}"
    return json.dumps(said)
"""
"""``syscalls(CALLS)``: what each call answered, as JSON (needs ``ctypes``, ``json`` and ``os`` imported)."""
