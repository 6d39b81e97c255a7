"""Nothing a process of ``--process-uids`` writes or starts reaches the next owner of its uid, even after its gateway
was killed by SIGKILL: what it wrote was its namespace's (the host's files read-only, its home and temporary
directories a tmpfs each), what it started ended with its namespace, and its uid is given out once no process of it
runs, so nothing is left to sweep (issue 85; issue 76's red team found what a sweep missed). A real gateway process,
run as root under bubblewrap, in front of the hostile stdio server of ``e2e._sealed``; a range of one uid, so that
the next gateway's process has the last one's uid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from _redis import missing
from _uids import members, uids
from _waits import WITHIN, until
from conftest import SECRET
from e2e._gateway import checkout_every_uid_imports, main_run, python_every_uid_runs, readable_directory
from e2e._sealed import call, client, gateway, needs, of_uid, running, text
from mcp_sessions._gateway.sealed._kernel import running_uids

GONE = "denied: No such file or directory"


def test_nothing_a_uid_wrote_or_started_reaches_its_next_owner_even_after_its_gateway_was_killed(server: str) -> None:
    needs("root", "bwrap")
    marker = f"daemon-{uuid.uuid4().hex}"
    [uid] = members(one := uids(210, 1))
    sealed = ("--process-uids", one, "--sessionless", "shared", "--process-containment", "bwrap")
    with readable_directory("mcp-sessions-shared-") as shared, gateway(server, *sealed) as first:
        shared.chmod(0o1777)  # a directory of the host's any uid may write, as /var/tmp is to an uncontained one
        mcp = client(first)
        home = json.loads(text(call(mcp, "whoami")))["cwd"]
        left = [f"{directory}/left-by-{marker}" for directory in (home, "/tmp", "/var/tmp", "/dev/shm", "/run/lock")]
        assert [text(call(mcp, "write", path=path)) for path in left] == ["4"] * len(left)
        assert text(call(mcp, "write", path=f"{shared}/left")) == "denied: Read-only file system"
        assert text(call(mcp, "deep", path=home, depth=1500)) == "made"  # Python's rmtree raised RecursionError
        assert text(call(mcp, "daemon", marker=marker)) == "started"
        until(lambda: len(running(marker)) == 1, "the daemon")
        assert first.process is not None
        first.process.send_signal(signal.SIGKILL)  # the gateway alone: it ends nothing, removes nothing
        first.process.wait(timeout=WITHIN)
        until(lambda: not of_uid(uid), "its processes to end with their namespace")
        assert not list(shared.iterdir())
    with gateway(server, *sealed) as second:
        mcp = client(second)
        assert json.loads(text(call(mcp, "whoami")))["uid"] == uid
        assert [text(call(mcp, "read", path=path)) for path in left] == [GONE] * len(left)


def test_a_container_root_that_cannot_write_its_runtime_directory_is_told_which_in_one_line() -> None:
    """110.5: a gateway whose root is not the host's (a container's or a pod's: a user namespace's root), before a
    runtime directory its host's root owns, died with a ``PermissionError`` traceback from the lock of its egress
    table; now it refuses in one line that names the directory and what to give, before any process starts. The
    directory is systemd's ``RUNTIME_DIRECTORY``, which the gateway reads (``RuntimeDirectory=``)."""
    needs("root", "unshare")
    [user] = members(uids(284, 1))
    container = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "unshare", "--user"]
    container.append("--map-root-user")  # its root is the host's uid `user`
    if subprocess.run([*container, "true"], capture_output=True, timeout=WITHIN, check=False).returncode != 0:
        missing("this host gives an unprivileged user no user namespace (sysctl user.max_user_namespaces)")
    python = python_every_uid_runs()
    with checkout_every_uid_imports("mcp-sessions-container-") as (top, imported):
        state = top / "state"
        state.mkdir(mode=0o700)
        os.chown(state, user, user)  # the container root's
        runtime = top / "run"
        runtime.mkdir(mode=0o755)  # the host root's, as the host's /run/mcp-sessions
        environ = {"PATH": os.environ["PATH"], "HOME": str(top), "MCP_SESSIONS_SECRET": SECRET}
        environ |= {"PYTHONPATH": imported, "RUNTIME_DIRECTORY": str(runtime)}
        sealed = ("--process-uids", uids(285, 3), "--process-state", str(state))
        line = [*container, python, "-m", "mcp_sessions", "gateway", "--port", "0", "--stdio", f"{python} -c pass"]
        done = subprocess.run(
            [*line, *sealed], env=environ, capture_output=True, text=True, timeout=WITHIN, cwd=top, check=False
        )
    said = (
        f"mcp-sessions gateway: the runtime directory {runtime}: Permission denied: give one the gateway's user (uid "
        "0) may write, by --runtime-directory DIR or systemd's RuntimeDirectory= (RUNTIME_DIRECTORY), the same for "
        "every gateway of the host\n"
    )
    assert (done.returncode, done.stderr) == (2, said)


def test_a_zombie_of_a_uid_is_not_a_process_of_it() -> None:
    """A killed gateway's helper of a process's uid is a zombie of that uid until whoever adopted it reaps it: a
    gateway restarted at once (systemd's Restart=) takes that uid, where it exited for "no free uid" (issue 94, item
    3)."""
    needs("root")
    [uid] = members(uids(211, 1))
    ended = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "true"])
    try:
        until(lambda: Path(f"/proc/{ended.pid}/status").read_text().split("\nState:\t")[1][0] == "Z", "its end")
        assert uid not in running_uids()
    finally:
        ended.wait(timeout=WITHIN)
    held = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "60"])
    try:
        until(lambda: uid in running_uids(), "its uid, once setpriv has taken it")  # a live process of it counts
    finally:
        held.kill()
        held.wait(timeout=WITHIN)


@pytest.mark.parametrize("how", ["its interpreter", "a script's #! line", "a link's middle"])
def test_a_server_under_a_directory_its_uid_may_not_search_is_one_line_at_start(how: str) -> None:
    """Issue 94 (Why, 7): a server whose interpreter is under a 0700 directory (a virtual environment under /root)
    started, and each process failed with ``exec: <venv>/bin/python: Permission denied``, naming a 0777 link, never
    the directory. Now the gateway searches the way as the processes' uid at startup, and says which directory.
    Issue 100 (10): every link's way too, where the first name and the last target are searchable but a link
    between lies under a 0700 directory (a venv's ``python`` that leads to pyenv's, under /root, by another)."""
    needs("root")
    with readable_directory("mcp-sessions-private-") as readable:
        private = readable / "home"
        (private / "venv" / "bin").mkdir(parents=True)
        private.chmod(0o700)  # as /root is
        python = private / "venv" / "bin" / "python"
        python.symlink_to(sys.executable if how != "a link's middle" else python_every_uid_runs())
        script = readable / "server"  # where every user may read it, its interpreter not
        script.write_text(f"#!{python}\n")
        script.chmod(0o755)
        command = {"its interpreter": f"{python} -c pass", "a script's #! line": str(script)}.get(how)
        if command is None:  # readable/python -> home/venv/bin/python -> the system's python3, which every uid runs
            (readable / "python").symlink_to(python)
            command, python = f"{readable}/python -c pass", readable / "python"
        # by main in this process (refused before the port is bound): a fresh interpreter cost a CPU-second a case;
        # with no containment, which the gateway refuses with --process-uids in another line, after this search
        environ = {"MCP_SESSIONS_SECRET": SECRET, "PATH": os.environ["PATH"]}
        sealed = uids(212, 2)
        line = ("gateway", "--stdio", command, "--process-uids", sealed, "--process-containment", "none")
        done = main_run(*line, environ=environ)
    uid = members(sealed)[0]
    where = "leads, by a link, through" if how == "a link's middle" else "is under"
    said = f"mcp-sessions gateway: --stdio: {python} {where} {private} (mode 700), which the processes' uid ({uid})"
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(said), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
