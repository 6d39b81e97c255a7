"""What a sealed process may keep (issue 92): a home of its own, and the host's directories the operator grants
(``--process-mount SOURCE:TARGET[:rw]``), a user's own among them (``{user}`` in SOURCE). A real gateway process, run
as root under bubblewrap and unshare, in front of the hostile stdio server of ``e2e._sealed``, reached by two users
with JWKS-signed tokens.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from _mcp import ModernClient, session_meta
from _uids import members, uids
from _waits import until
from conftest import SECRET
from e2e._gateway import CACHE, Process, for_every_uid, installed, main_run, node, readable_directory
from e2e._issuer import ISSUER, signed
from e2e._sealed import AUTH, OPEN, call, client, gateway, needs, running, team, text
from e2e._stdio import FILESYSTEM

UIDS = uids(450, 40)
KEPT = uids(280, 3)
"""The team test's uids: the shared process's, alice's and bob's, so that a next conversation would be given one of
theirs."""
TEAM = int(uids(449, 1).partition("-")[0])
CONTAINMENTS = ["bwrap", "unshare"]
SECRETLY = {"MCP_SESSIONS_SECRET": SECRET}


def run(mcp: ModernClient, session: dict[str, Any], *argv: str) -> dict[str, Any]:
    """``argv`` run by the user's process (the hostile server's ``run``): its exit status and output."""
    done: dict[str, Any] = json.loads(text(call(mcp, "run", session, argv=list(argv))))
    return done


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_a_process_s_home_is_its_own(server: str, jwks: str, containment: str) -> None:
    """Its home is its uid's and gid's, mode 0700 (not root's 1777): it may chmod it, and ``git init`` there works
    (git refuses a repository in a directory of another owner's: "dubious ownership")."""
    needs("root", containment)
    options = (*team(jwks)[:-2], "--process-uids", UIDS, "--process-containment", containment)
    with gateway(server, *options) as process:
        alice = client(process, user="alice")
        hers = alice.create_session()
        she = json.loads(text(call(alice, "whoami", hers)))
        home = she["environ"]["HOME"]
        assert run(alice, hers, "stat", "-c", "%u %g %a", home)["stdout"].split() == [
            str(she["uid"]),
            str(she["gid"]),
            "700",
        ]
        assert text(call(alice, "chmod", hers, path=home, mode=0o750)) == "changed"
        assert text(call(alice, "mode", hers, path=home)) == "0o750"
        made = run(alice, hers, "git", "init", f"{home}/project")
        assert made["returncode"] == 0, made
        status = run(alice, hers, "git", "-C", f"{home}/project", "status", "--short")
        assert (status["returncode"], status["stderr"]) == (0, ""), status


@contextlib.contextmanager
def users_directory() -> Iterator[Path]:
    """The USERS of ``--process-mount USERS/{user}:...``: root's, mode 0700, where a process would see it (not under
    /tmp)."""
    with readable_directory("mcp-sessions-users-") as users:
        users.chmod(0o700)
        yield users


def signed_in(process: Process, principal: str) -> ModernClient:
    """A client of the gateway's, signed in as ``principal`` (a token's subject, any string)."""
    claims = {"iss": ISSUER, "aud": f"http://127.0.0.1:{process.port}/mcp", "sub": principal}
    http = httpx.Client(
        timeout=30, headers={"Authorization": f"Bearer {signed({**claims, 'exp': int(time.time()) + 600})}"}
    )
    OPEN.append(http)
    return ModernClient(http, f"http://127.0.0.1:{process.port}")


def servers(command: str) -> list[int]:
    """The pids of ``command``'s live server processes, each run as one of :data:`UIDS` (not the helpers before
    them, nor the gateway, whose command lines name it too)."""
    return [pid for pid in running(command.split()[-1]) if os.stat(f"/proc/{pid}").st_uid in members(UIDS)]


def verified(jwks: str) -> tuple[str, ...]:
    """The gateway's auth: tokens of the test's issuer, verified with ``jwks``."""
    return ("--auth-jwks", jwks, "--auth-issuer", ISSUER, "--auth-audience", "{url}")


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_a_user_s_directory_is_hers_across_conversations_and_restarts_and_no_one_else_s(
    server: str, jwks: str, containment: str
) -> None:
    """``USERS/{user}:/tmp/data:rw``: what alice writes in one conversation, her next one reads and edits (another
    process, another uid), and so does her conversation after the gateway's restart; bob's /tmp/data is his own, empty,
    and her directory, which his process sees on the host's read-only view, he can neither list, read nor write (her
    group is hers alone); the directory is made on her first use, root's, mode 2770, named by a digest."""
    needs("root", containment)
    with users_directory() as users:
        options = (*verified(jwks), "--process-uids", UIDS, "--process-containment", containment)
        options += ("--process-mount", f"{users}/{{user}}:/tmp/data:rw")
        with gateway(server, *options) as process:
            said = r"a uid each, bounds .+?, grants /tmp/data \(rw, each user's own\), network"
            assert re.search(said, process.output()), process.output()[:1500]
            alice, bob = client(process, user="alice"), client(process, user="bob")
            first = alice.create_session()
            she = json.loads(text(call(alice, "whoami", first)))
            assert text(call(alice, "write", first, path="/tmp/data/notes")) == "4"
            [hers] = list(users.iterdir())
            found = hers.stat()
            assert (found.st_uid, stat.S_IMODE(found.st_mode), len(hers.name)) == (0, 0o2770, 52)
            assert found.st_gid in she["groups"]
            assert found.st_gid != she["uid"]
            assert (hers / "notes").stat().st_gid == found.st_gid
            second = alice.create_session()
            assert json.loads(text(call(alice, "whoami", second)))["uid"] != she["uid"]  # another process
            assert text(call(alice, "read", second, path="/tmp/data/notes")) == "mine"
            assert text(call(alice, "write", second, path="/tmp/data/notes")) == "4"  # hers to edit, whichever uid
            his = bob.create_session()
            assert text(call(bob, "listdir", his, path="/tmp/data")) == "[]"
            tried = [
                text(call(bob, "listdir", his, path=str(hers))),
                text(call(bob, "read", his, path=f"{hers}/notes")),
                text(call(bob, "write", his, path=f"{hers}/planted")),
            ]
            assert tried == ["denied: Permission denied"] * 3
            assert text(call(bob, "write", his, path="/tmp/data/his")) == "4"
            assert len(list(users.iterdir())) == 2  # his, made as he asked
        with gateway(server, *options) as process:
            alice = client(process, user="alice")
            again = alice.create_session()
            assert text(call(alice, "listdir", again, path="/tmp/data")) == '["notes"]'
            assert text(call(alice, "read", again, path="/tmp/data/notes")) == "mine"


def given_back(uid: int) -> bool:
    """Whether no gateway holds ``uid`` (its lock, ``_sandbox.UID_LOCKS``): its process's place is left."""
    lock = os.open(f"/run/mcp-sessions/uids/{uid}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(lock)
    return True


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_a_shared_tree_is_read_and_edited_by_each_user_s_processes_and_read_only_unless_granted_rw(
    server: str, jwks: str, containment: str, tmp_path: Path
) -> None:
    """A team's tree (``chgrp team tree; chmod 2770 tree``) granted ``:rw``: alice's process writes a file, bob's
    reads and edits it and adds his own, hers reads his (its group is the team's, each process has it as a
    supplementary group, and writes with a umask of 0007); the same tree granted read-only is read, never written
    (``Read-only file system``); and no process is given root's group by a tree of root's. A file she makes 0600
    there is her uid's, which is kept for her once her conversation ends (issue 100, finding 3: bob's next
    conversation was given it, and read the file): his is refused, hers is given it and reads the file. No process
    is started ahead (``--warm`` asked for in vain): its uid would be no one's when her conversation took it."""
    needs("root", containment)
    with readable_directory("mcp-sessions-team-") as team, readable_directory("mcp-sessions-docs-") as docs:
        os.chown(team, 0, TEAM)
        team.chmod(0o2770)
        (docs / "readme").write_text("the host's")
        docs.chmod(0o2777)  # root's group, setgid: a tree of root's gives no group
        options = (*verified(jwks), "--process-uids", KEPT, "--process-containment", containment)
        options += ("--process-mount", f"{team}:/tmp/team:rw", "--process-mount", f"{team}:/tmp/team-ro")
        options += ("--process-mount", f"{docs}:{docs}", "--process-state", str(tmp_path))
        options += ("--warm", "2")  # none: a process started ahead is no one's, its uid not yet its user's
        with gateway(server, *options) as process:
            said = f"grants /tmp/team (rw, group {TEAM}), /tmp/team-ro (ro, group {TEAM}), {docs} (ro), network"
            assert said in process.output()
            alice, bob = client(process, user="alice"), client(process, user="bob")
            hers, his = alice.create_session(), bob.create_session()
            she = json.loads(text(call(alice, "whoami", hers)))
            assert set(she["groups"]) - {she["gid"]} == {TEAM}
            assert text(call(alice, "write", hers, path="/tmp/team/plan")) == "4"
            assert text(call(bob, "read", his, path="/tmp/team/plan")) == "mine"
            edited = run(bob, his, "sh", "-c", "echo 'and his' >> /tmp/team/plan && echo his > /tmp/team/his")
            assert edited["returncode"] == 0, edited
            assert text(call(alice, "read", hers, path="/tmp/team/plan")) == "mineand his\n"
            assert text(call(alice, "read", hers, path="/tmp/team/his")) == "his\n"
            plan = (team / "plan").stat()
            assert (plan.st_gid, stat.S_IMODE(plan.st_mode)) == (TEAM, 0o660)
            assert text(call(bob, "read", his, path="/tmp/team-ro/plan")).startswith("mine")
            assert text(call(bob, "write", his, path="/tmp/team-ro/plan")) == "denied: Read-only file system"
            assert text(call(bob, "read", his, path=f"{docs}/readme")) == "the host's"
            assert text(call(bob, "write", his, path=f"{docs}/planted")) == "denied: Read-only file system"
            kept = run(alice, hers, "sh", "-c", "umask 077 && echo hers > /tmp/team/secret")
            assert kept["returncode"] == 0, kept
            assert text(call(bob, "read", his, path="/tmp/team/secret")) == "denied: Permission denied"
            alice.request("sessions/delete", session=session_meta(hers))
            until(lambda: given_back(she["uid"]), "her conversation's uid given back")
            _, refused = bob.request("sessions/create")
            assert "no free uid in --process-uids" in json.dumps(refused), refused
            again = alice.create_session()
            assert json.loads(text(call(alice, "whoami", again)))["uid"] == she["uid"]
            assert text(call(alice, "read", again, path="/tmp/team/secret")) == "hers\n"
        owner = os.readlink(tmp_path / "uids" / str(she["uid"]))  # kept for her, for good: the next gateway's too
        assert os.listdir(tmp_path / "owners" / owner) == [str(she["uid"])]


REFUSED = [
    (("--process-mount", "/srv"), "give SOURCE:TARGET, SOURCE:TARGET:ro or SOURCE:TARGET:rw (no ':' in a path)"),
    (("--process-mount", "{tree}:/tmp/x:rx"), "give SOURCE:TARGET, SOURCE:TARGET:ro or SOURCE:TARGET:rw"),
    (("--process-mount", "srv:/tmp/x"), "SOURCE and TARGET are absolute paths"),
    (
        ("--process-mount", "{tree}:/tmp/a/../b"),
        "TARGET is a path in the process's namespace, without '{user}' or '..'",
    ),
    (("--process-mount", "{users}/{user}:/tmp/{user}"), "without '{user}' or '..'"),
    (("--process-mount", "{tree}-missing:/tmp/x"), "-missing is not a directory of the host's"),
    (("--process-mount", "{tree}:/"), "TARGET may not be /, nor under /proc, /dev or /sys"),
    (("--process-mount", "{tree}:/proc/x"), "TARGET may not be /, nor under /proc, /dev or /sys"),
    (("--process-mount", "{tree}:/tmp"), "TARGET would hide the processes' homes (/tmp/mcp-sessions): choose another"),
    (("--process-mount", "{tree}:/run"), "TARGET would hide the process's own /run/lock"),
    (("--process-mount", "{tree}:/var"), "TARGET would hide the process's own /var/tmp"),
    (("--process-mount", "{tree}:/etc"), "TARGET would hide the process's own /etc/resolv.conf"),
    (("--process-mount", "{tree}:/tmp/mcp-sessions/x"), "TARGET would hide the processes' homes (/tmp/mcp-sessions)"),
    (("--process-mount", "{tree}:/srv/no-such-target"), "/srv/no-such-target is not a directory of the host's"),
    (("--process-mount", "{tree}:/tmp/a", "--process-mount", "{tree}:/tmp/a/b"), "/tmp/a/b is under another grant's"),
    (("--process-mount", "{users}/{user}/notes:/tmp/x"), "'{user}' is SOURCE's last part, once: USERS/{user}"),
    (
        ("--process-mount", "{tree}/{user}:/tmp/x"),
        "must be a directory root's alone may search (chown root; chmod 0700)",
    ),
    (("--process-mount", "{users}/{user}:/tmp/x", "--process-mount", "{others}/{user}:/tmp/y"), "one USERS/{user}"),
    (("--process-mount", "{tree}/searchable/{user}:/tmp/x"), "root's alone may search (chown root; chmod 0700)"),
]


@pytest.mark.parametrize(("given", "said"), REFUSED)
def test_a_grant_the_gateway_cannot_give_is_refused_at_startup_in_one_line(given: tuple[str, ...], said: str) -> None:
    needs("root", "bwrap")
    with readable_directory("mcp-sessions-tree-") as tree, users_directory() as users, users_directory() as others:
        tree.chmod(0o777)
        (tree / "searchable").mkdir(mode=0o711)  # a USERS any process could search: 0711, as it was
        flags = [flag.replace("{tree}", str(tree)).replace("{users}", str(users)) for flag in given]
        flags = [flag.replace("{others}", str(others)) for flag in flags]
        done = main_run("gateway", "--stdio", "/usr/bin/true", "--process-uids", UIDS, *AUTH, *flags, environ=SECRETLY)
    assert done.returncode == 2, done
    assert done.stderr.startswith("mcp-sessions gateway: --process-"), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert said in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (("--process-uids", UIDS), "--process-mount USERS/{user} needs the gateway's auth (--auth-*)"),
        (AUTH, "--process-mount USERS/{user} needs --process-uids"),
        ((*AUTH, "--process-uids", UIDS, "--sessionless", "shared"), "a process shared by every user is no one's"),
        ((*AUTH, "--process-uids", UIDS, "--process-user-gids", UIDS), "and --process-uids (each process's own gid)"),
        ((*AUTH, "--process-uids", UIDS, "--process-user-gids", "0-9"), "--process-user-gids takes FIRST-LAST"),
        (("--process-containment", "none", "--process-mount", "/srv:/srv"), "--process-mount needs a containment"),
        ((*AUTH, "--process-uids", UIDS, "--process-state", "/tmp"), "--process-state /tmp: it must be the gateway's"),
    ],
)
def test_a_user_s_directory_needs_her_name_and_a_uid_each(given: tuple[str, ...], said: str) -> None:
    """Without the gateway's auth no caller has a name of her own; without a uid each, her processes would share one
    with other users'; a process shared by every user is no one's; her group meets no other id: each refused at
    startup, in one line (a process with no user never has a user's directory). And no grant without a mount
    namespace."""
    needs("root", "bwrap")
    with users_directory() as users:
        flags = ("--process-mount", f"{users}/{{user}}:/tmp/x:rw", *given)
        if "none" in given:
            flags = given
        done = main_run("gateway", "--stdio", "/usr/bin/true", *flags, environ=SECRETLY)
    assert (done.returncode, said in done.stderr, done.stderr.count("\n")) == (2, True, 1), done.stderr


def test_an_upstream_s_gateway_refuses_a_grant() -> None:
    done = main_run("gateway", "--upstream", "http://[::1]:1/mcp", "--process-mount", "/srv:/srv", environ=SECRETLY)
    said = "--process-mount grants a directory to --stdio processes; an --upstream has none"
    assert (done.returncode, done.stderr) == (2, f"mcp-sessions gateway: {said}\n")


def test_a_principal_s_name_never_escapes_nor_takes_another_s_directory(server: str, jwks: str) -> None:
    """Principals named ``../x``, ``a/b``, ``..``, 2,000 characters long, or with a lone surrogate each get a directory
    of their own in USERS, a digest's name: nothing is made outside it, and no two share one. The shared process,
    which is no one's, has an empty read-only directory there. Another gateway's first user, in its own USERS, gets
    a group of her own too (issue 100, finding 4: she had the first gateway's first user's, and read her directory),
    and her process can neither list nor search either USERS (mode 0700)."""
    needs("root", "bwrap")
    principals = ["../x", "a/b", "..", "x" * 2000, "\udcff", "alice"]
    with readable_directory("mcp-sessions-grants-") as above:  # USERS's parent, which no other test writes in
        users = above / "users"
        users.mkdir(mode=0o700)
        options = (*verified(jwks), "--process-uids", UIDS, "--process-containment", "bwrap")
        options += ("--process-mount", f"{users}/{{user}}:/tmp/data:rw")
        with gateway(server, *options) as process:
            [shared] = servers(server)
            assert os.listdir(f"/proc/{shared}/root/tmp/data") == []
            with pytest.raises(OSError, match="Read-only file system"):
                Path(f"/proc/{shared}/root/tmp/data/planted").write_text("")
            for principal in principals:
                mcp = signed_in(process, principal)
                session = mcp.create_session()
                assert text(call(mcp, "write", session, path="/tmp/data/mine")) == "4", principal
                assert text(call(mcp, "listdir", session, path="/tmp/data")) == '["mine"]', principal
            groups = {path.stat().st_gid for path in users.iterdir()}
            with readable_directory("mcp-sessions-grants-") as beside:  # another gateway's USERS, the default gids
                theirs = beside / "users"
                theirs.mkdir(mode=0o700)
                other = (*options[:-2], "--process-mount", f"{theirs}/{{user}}:/tmp/data:rw")
                with gateway(server, *other) as second:
                    bob = signed_in(second, "bob")
                    his_session = bob.create_session()
                    assert text(call(bob, "write", his_session, path="/tmp/data/his")) == "4"
                    [his] = list(theirs.iterdir())
                    assert his.stat().st_gid not in groups  # issue 100, finding 4: its first user had the first's
                    hers = min(users.iterdir())
                    tried = [
                        text(call(bob, "listdir", his_session, path=str(users))),
                        text(call(bob, "mode", his_session, path=str(hers))),
                        text(call(bob, "read", his_session, path=f"{hers}/mine")),
                        text(call(bob, "listdir", his_session, path=str(theirs))),
                        text(call(mcp, "mode", session, path=str(his))),  # the first gateway's last user's process
                        text(call(mcp, "read", session, path=f"{his}/his")),
                    ]
                    assert tried == ["denied: Permission denied"] * 6
        made = list(users.iterdir())
        assert len(made) == len(principals)
        assert all(re.fullmatch(r"[a-z2-7]{52}", path.name) for path in made)
        assert len({path.stat().st_gid for path in made}) == len(principals)
        assert list(above.iterdir()) == [users]


MEMORY = CACHE / "memory/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
PLAN = {"entities": [{"name": "alice-s-plan", "entityType": "plan", "observations": ["launch on Friday"]}]}


def test_server_filesystem_edits_a_team_s_project_tree_through_the_gateway(jwks: str, tmp_path: Path) -> None:
    """docs/gateway.md's recipe: @modelcontextprotocol/server-filesystem given the team's project tree (``:rw``, its
    group the team's): alice's conversation writes a file, bob's edits it, hers reads his edit, and the host has it,
    the team's."""
    needs("root", "bwrap")
    with for_every_uid(FILESYSTEM, CACHE / "filesystem") as index, readable_directory("mcp-sessions-project-") as tree:
        os.chown(tree, 0, TEAM)
        tree.chmod(0o2770)
        options = (*verified(jwks), "--process-uids", UIDS, "--process-mount", f"{tree}:{tree}:rw")
        options += ("--process-state", str(tmp_path))  # the uids kept for its users: the test's alone
        with gateway(f"{node()} {index} {tree}", *options) as process:
            alice, bob = client(process, user="alice"), client(process, user="bob")
            hers, his = alice.create_session(), bob.create_session()
            written = call(alice, "write_file", hers, path=f"{tree}/plan.md", content="launch on Friday\n")
            assert "Successfully wrote" in text(written), written
            edits = [{"oldText": "Friday", "newText": "Monday"}]
            assert "Monday" in text(call(bob, "edit_file", his, path=f"{tree}/plan.md", edits=edits))
            assert text(call(alice, "read_text_file", hers, path=f"{tree}/plan.md")) == "launch on Monday\n"
        assert (tree / "plan.md").read_text() == "launch on Monday\n"
        assert (tree / "plan.md").stat().st_gid == TEAM


def test_server_memory_keeps_each_user_s_graph_across_conversations_and_restarts(jwks: str) -> None:
    """docs/gateway.md's recipe: @modelcontextprotocol/server-memory with ``MEMORY_FILE_PATH`` in each user's own
    directory (``USERS/{user}``): alice's graph is in her next conversation, and after the gateway's restart; bob's
    graph never has it."""
    needs("root", "bwrap")
    memory = installed(MEMORY, "@modelcontextprotocol/server-memory")
    with for_every_uid(memory, CACHE / "memory") as index, users_directory() as users:
        command = f"env MEMORY_FILE_PATH=/tmp/mine/memory.jsonl {node()} {index}"
        options = (*verified(jwks), "--process-uids", UIDS, "--process-mount", f"{users}/{{user}}:/tmp/mine:rw")
        with gateway(command, *options) as process:
            alice, bob = client(process, user="alice"), client(process, user="bob")
            created = call(alice, "create_entities", alice.create_session(), **PLAN)
            assert "alice-s-plan" in json.dumps(created), created
            assert "alice-s-plan" in json.dumps(call(alice, "read_graph", alice.create_session()))
            assert "alice-s-plan" not in json.dumps(call(bob, "read_graph", bob.create_session()))
        with gateway(command, *options) as process:
            alice, bob = client(process, user="alice"), client(process, user="bob")
            assert "alice-s-plan" in json.dumps(call(alice, "read_graph", alice.create_session()))
            assert "alice-s-plan" not in json.dumps(call(bob, "read_graph", bob.create_session()))
