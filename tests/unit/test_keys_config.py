"""Keys from configuration (KeySet.from_config: JWKS, kid:secret pairs, @file), from_env's key and Redis settings,
and ``mcp-sessions keygen --kid``: a kid its ``MCP_SESSIONS_KEYS=kid:secret`` line keeps whole, or a usage error."""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from jwt.algorithms import ECAlgorithm, OKPAlgorithm
from redis.asyncio import Redis

from _mcp import b64
from conftest import SECRET, signer_of
from mcp_sessions import InvalidToken, KeySet, MCPSessionMiddleware, SessionKey
from mcp_sessions._cli import main
from mcp_sessions.stores import MemoryStore, RedisStore

OLD = "old-secret-0123456789-0123456789-0123456789"
NEW = "new-secret-9876543210-9876543210-9876543210"
MAIN = Path(__file__).resolve().parents[2]


async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover - never called
    raise AssertionError("configuration tests never call the app")


def oct_jwk(kid: str, secret: bytes, **extra: Any) -> dict[str, Any]:
    return {"kty": "oct", "kid": kid, "k": b64(secret), **extra}


def jwk(kid: str, key: Any) -> dict[str, Any]:
    """``key``'s JWK as PyJWT writes it (P-256 or Ed25519, private or public), under ``kid``."""
    writer = OKPAlgorithm if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey) else ECAlgorithm
    return {**json.loads(writer.to_jwk(key)), "kid": kid}


def crosses(signing: KeySet, verifying: KeySet) -> bool:
    """Whether a session minted by ``signing`` verifies under ``verifying``."""
    token, claims = signing.mint_session_token(ttl=60)
    try:
        return verifying.verify_session_token(token).session_id == claims.session_id
    except InvalidToken:
        return False


def test_pairs_tolerate_spaces_newlines_comments_and_a_trailing_comma() -> None:
    keys = KeySet.from_config(f"# rotation 2026-11\n old : {OLD} ,\n\n new:{NEW},\n", signer="new")
    assert [k.kid for k in keys.keys] == ["old", "new"]
    assert signer_of(keys).kid == "new"


def test_a_secret_may_contain_colons() -> None:
    keys = KeySet.from_config(f"k1:{OLD}:with:colons")
    assert crosses(keys, KeySet([SessionKey.from_secret(f"{OLD}:with:colons", kid="k1")]))


def test_an_empty_kid_derives_the_kid_of_mcp_sessions_secret() -> None:
    """The migration path from MCP_SESSIONS_SECRET: its sessions keep verifying under the key set."""
    legacy = KeySet.from_secret(OLD)
    keys = KeySet.from_config(f":{OLD},new:{NEW}", signer="new")
    assert keys.keys[0].kid == signer_of(legacy).kid
    assert crosses(legacy, keys)
    assert crosses(keys, KeySet([SessionKey.from_secret(NEW, kid="new")]))


def test_jwks_with_every_key_type() -> None:
    es, ed = ec.generate_private_key(ec.SECP256R1()), ed25519.Ed25519PrivateKey.generate()
    jwks = {"keys": [oct_jwk("hs", NEW.encode(), alg="HS256", use="sig"), jwk("es", es), jwk("ed", ed)]}
    keys = KeySet.from_config(json.dumps(jwks), signer="es")
    assert [(k.kid, k.algorithm, k.can_sign) for k in keys.keys] == [
        ("hs", "HS256", True),
        ("es", "ES256", True),
        ("ed", "EdDSA", True),
    ]
    assert signer_of(keys).kid == "es"
    for signer in ("hs", "es", "ed"):
        assert crosses(KeySet.from_config(json.dumps(jwks), signer=signer), keys)


def test_public_jwks_verify_only() -> None:
    es, ed = ec.generate_private_key(ec.SECP256R1()), ed25519.Ed25519PrivateKey.generate()
    signing_es = KeySet.from_config(json.dumps({"keys": [jwk("es", es)]}))
    signing_ed = KeySet.from_config(json.dumps([jwk("ed", ed)]))
    public = [jwk("es", es.public_key()), jwk("ed", ed.public_key())]
    # A verify-only key set still needs a signer: here an HS256 key of its own.
    verifier = KeySet.from_config(json.dumps({"keys": [*public, oct_jwk("own", OLD.encode())]}))
    assert [k.can_sign for k in verifier.keys] == [False, False, True]
    assert signer_of(verifier).kid == "own"
    assert crosses(signing_es, verifier)
    assert crosses(signing_ed, verifier)
    verify_only = KeySet.from_config(json.dumps({"keys": public}))
    assert verify_only.signer is None
    assert crosses(signing_es, verify_only)
    token, claims = signing_ed.mint_session_token(ttl=60)
    assert verify_only.verify_session_token(token) == claims
    with pytest.raises(ValueError, match="the KeySet is verify-only"):
        MCPSessionMiddleware(app, keys=verify_only)


def test_a_single_jwk_is_a_key_set_of_one() -> None:
    keys = KeySet.from_config(json.dumps(oct_jwk("only", OLD.encode())))
    assert signer_of(keys).kid == "only"


def test_from_a_file(tmp_path: Path) -> None:
    pairs = tmp_path / "keys.txt"
    pairs.write_text(f"old:{OLD}\nnew:{NEW}\n")
    assert [k.kid for k in KeySet.from_config(f"@{pairs}").keys] == ["old", "new"]
    jwks = tmp_path / "keys.json"
    jwks.write_text(json.dumps({"keys": [oct_jwk("j", NEW.encode())]}))
    assert signer_of(KeySet.from_config(f" @ {jwks} ")).kid == "j"


# -- errors: clear, and never quoting secrets ----------------------------------------------------------

SHORT = "short-secret-never-echoed"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "MCP_SESSIONS_KEYS is empty"),
        ("  \n ", "MCP_SESSIONS_KEYS is empty"),
        (",,", "holds no key"),
        (OLD, "entry 1 is not kid:secret"),
        (f"a:{OLD},{SHORT}", "entry 2 is not kid:secret"),
        ("a:", "entry 1 is not kid:secret"),
        (f"k:{SHORT}", r"MCP_SESSIONS_KEYS: entry 1: the session secret must be at least 32 bytes"),
        (f"k:{OLD},k:{NEW}", "entries 1 and 2 have the same kid"),
        (f"k\x01:{OLD}", "kid that is not 1 to 64 visible ASCII characters"),
        ("x" * 65 + f":{OLD}", "kid that is not 1 to 64 visible ASCII characters"),
        ("@", "'@' must be followed by the path"),
        ("@/nonexistent/keys", "cannot read the key file named after '@' \\(No such file or directory\\)"),
        (f"@{SHORT}", "cannot read the key file named after '@'"),
        (f"@k2026:{SHORT}", "entry 1: the session secret must be at least 32 bytes"),
        ('{"keys": [', r"is not valid JSON \(line 1, column 11\)"),
        ('{"keys": []}', "a JWKS is an object"),
        ("[1]", "key 1 is not a JSON object"),
        (json.dumps({"keys": [{"kty": "oct", "k": b64(OLD.encode())}]}), "key 1 needs a 'kid'"),
        (json.dumps([oct_jwk("a", SHORT.encode())]), "key 'a': the session secret must be at least 32 bytes"),
        (json.dumps([{"kty": "oct", "kid": "a", "k": SHORT + "!"}]), "'k' is not valid base64url"),
        (json.dumps([{"kty": "oct", "kid": "a", "k": "A"}]), "'k' is not valid base64url"),
        (json.dumps([{"kty": "oct", "kid": "a", "k": 1}]), "'k' is not valid base64url"),
        (json.dumps([{"kty": "oct", "kid": "a"}]), "'k' is not valid base64url"),
        (json.dumps([oct_jwk("a", OLD.encode(), alg="HS512")]), "is HS256, not 'HS512'"),
        (json.dumps([oct_jwk("a", OLD.encode(), use="enc")]), "'use' must be 'sig'"),
        (json.dumps([{"kty": "RSA", "kid": "r", "n": "AQAB", "e": "AQAB"}]), "unsupported kty 'RSA'"),
        (json.dumps([{"kty": "EC", "crv": "P-384", "kid": "e"}]), "crv 'P-256'"),
        (json.dumps([{"kty": "EC", "crv": "P-256", "kid": "e", "x": b64(b"1" * 32)}]), "not a valid P-256 key"),
        (
            json.dumps([{"kty": "EC", "crv": "P-256", "kid": "e", "x": b64(b"1" * 32), "y": b64(b"2" * 32)}]),
            "not a valid P-256 key",
        ),
        (json.dumps([{"kty": "OKP", "crv": "X25519", "kid": "o"}]), "crv 'Ed25519'"),
        (json.dumps([{"kty": "OKP", "crv": "Ed25519", "kid": "o", "x": b64(b"1" * 31)}]), "not a valid Ed25519 key"),
    ],
)
def test_bad_configuration_is_a_clear_value_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        KeySet.from_config(text)
    assert str(info.value).startswith("MCP_SESSIONS_KEYS")
    for secret in (OLD, NEW, SHORT, b64(OLD.encode()), b64(SHORT.encode())):
        assert secret not in str(info.value)


def test_mismatched_private_and_public_parts_are_refused() -> None:
    es, other_es = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    mixed_ec = {**jwk("e", es), "d": jwk("e", other_es)["d"]}
    with pytest.raises(ValueError, match="not a valid P-256 key") as info:
        KeySet.from_config(json.dumps([mixed_ec]))
    assert mixed_ec["d"] not in str(info.value)
    ed, other_ed = ed25519.Ed25519PrivateKey.generate(), ed25519.Ed25519PrivateKey.generate()
    mixed_okp = {**jwk("o", ed), "x": jwk("o", other_ed)["x"]}
    with pytest.raises(ValueError, match="not a valid Ed25519 key") as info:
        KeySet.from_config(json.dumps([mixed_okp]))
    assert mixed_okp["d"] not in str(info.value)


@pytest.mark.parametrize("signer", ["missing", "pub"])
def test_the_signer_must_be_a_signing_key(signer: str) -> None:
    ed = ed25519.Ed25519PrivateKey.generate()
    text = json.dumps([oct_jwk("old", OLD.encode()), oct_jwk("new", NEW.encode()), jwk("pub", ed.public_key())])
    with pytest.raises(ValueError, match=f"the signer '{signer}' is none of the 2 keys that can sign here"):
        KeySet.from_config(text, signer=signer)


def test_errors_say_the_key_file_without_its_path(tmp_path: Path) -> None:
    """The path after '@' is never quoted: the operator knows it, and a mistyped value may be a secret."""
    path = tmp_path / "keys.txt"
    path.write_text(f"{OLD}\n")
    with pytest.raises(ValueError, match=r"MCP_SESSIONS_KEYS \(its key file\): entry 1 is not kid:secret") as info:
        KeySet.from_config(f"@{path}")
    assert OLD not in str(info.value)
    assert str(tmp_path) not in str(info.value)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="is not UTF-8 text") as info:
        KeySet.from_config(f"@{path}")
    assert str(tmp_path) not in str(info.value)


def test_an_at_sign_with_a_colon_is_a_kid_secret_pair() -> None:
    """'@k2026:<secret>' is a kid:secret pair by the grammar: a value with ':' never names a file."""
    keys = KeySet.from_config(f"@k2026:{OLD},new:{NEW}")
    assert [k.kid for k in keys.keys] == ["@k2026", "new"]
    assert crosses(keys, KeySet([SessionKey.from_secret(OLD, kid="@k2026")]))


@pytest.mark.parametrize(
    ("text", "signer", "message"),
    [
        (f"k1:{OLD},frag:{SHORT}", None, r"entry 2: the session secret must be at least 32 bytes"),
        (f"k1:{OLD},frag\x01:{OLD}", None, "entry 2 has a kid that is not"),
        (f"k1:{OLD},frag:{OLD}x,frag:{NEW}y", None, "entries 2 and 3 have the same kid"),
        (f"k1:{OLD},frag:{NEW}", "k2", "none of the 2 keys"),  # the signer error names no kid
    ],
)
def test_a_secret_split_at_a_comma_is_never_quoted(text: str, signer: str | None, message: str) -> None:
    """After a comma inside a secret, the next piece reads as an entry: its "kid" is part of the secret."""
    with pytest.raises(ValueError, match=message) as info:
        KeySet.from_config(text, signer=signer)
    assert "frag" not in str(info.value)


def test_from_env_keys_carry_issuer_audience_and_options() -> None:
    env = {"MCP_SESSIONS_KEYS": f"k:{OLD}", "MCP_SESSIONS_ISSUER": "https://i", "MCP_SESSIONS_AUDIENCE": "env-aud"}
    mw = MCPSessionMiddleware.from_env(app, environ=env, audience="option-aud", max_state_size=1000)
    assert (mw.keys.issuer, mw.keys.audience, mw.keys.max_state_size) == ("https://i", "option-aud", 1000)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MCP_SESSIONS_KEYS": f"k:{OLD}", "MCP_SESSIONS_SECRET": SECRET}, "are both set: set only one"),
        ({"MCP_SESSIONS_SIGNER": "k", "MCP_SESSIONS_SECRET": SECRET}, "MCP_SESSIONS_KEYS, which is not set"),
        ({"MCP_SESSIONS_SIGNER": "k"}, "MCP_SESSIONS_KEYS, which is not set"),
        ({"MCP_SESSIONS_KEYS": f"k:{OLD}", "MCP_SESSIONS_SIGNER": "nope"}, "the signer 'nope' is none of the"),
        ({"MCP_SESSIONS_KEYS": OLD}, "MCP_SESSIONS_KEYS: entry 1 is not kid:secret"),
        ({"MCP_SESSIONS_KEYS": f"@{OLD}"}, "MCP_SESSIONS_KEYS: cannot read the key file named after '@'"),
        ({"MCP_SESSIONS_KEYS": f"@k2026:{SHORT}"}, "MCP_SESSIONS_KEYS: entry 1: the session secret must be"),
    ],
)
def test_from_env_key_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        MCPSessionMiddleware.from_env(app, environ=env)
    for secret in (OLD, SECRET, SHORT):
        assert secret not in str(info.value)


def test_explicit_keys_or_secret_override_the_variables() -> None:
    env = {"MCP_SESSIONS_KEYS": "not even valid", "MCP_SESSIONS_SIGNER": "x", "MCP_SESSIONS_SECRET": SECRET}
    keys = KeySet.from_secret(NEW)
    assert MCPSessionMiddleware.from_env(app, environ=env, keys=keys).keys is keys
    assert (
        signer_of(MCPSessionMiddleware.from_env(app, environ=env, secret=OLD).keys).kid
        == signer_of(KeySet.from_secret(OLD)).kid
    )


@pytest.mark.anyio
async def test_from_env_redis_url_selects_a_redis_store() -> None:
    env = {
        "MCP_SESSIONS_SECRET": SECRET,
        "MCP_SESSIONS_REDIS_URL": "redis://127.0.0.1:1/0",
        "MCP_SESSIONS_REDIS_PREFIX": "tenant-a:",
        "MCP_SESSIONS_REDIS_TIMEOUT": "0.3",
        "MCP_SESSIONS_REDIS_CONNECT_TIMEOUT": "0.2",
    }
    mw = MCPSessionMiddleware.from_env(app, environ=env)  # no connection is made here
    assert isinstance(mw.store, RedisStore)
    assert (mw.store.prefix, mw.store.timeout) == ("tenant-a:", 0.3)
    assert isinstance(client := mw.store._redis, Redis)
    assert client.connection_pool.connection_kwargs["socket_connect_timeout"] == 0.2
    await mw.store.aclose()
    store = MemoryStore()
    assert MCPSessionMiddleware.from_env(app, environ=env, store=store).store is store


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("variable", "url"),
    [
        ("MCP_SESSIONS_STORE", "redis+cluster://127.0.0.1:1,127.0.0.1:2"),
        ("MCP_SESSIONS_REDIS_URL", "redis+sentinel://127.0.0.1:1/mymaster/0"),
    ],
)
async def test_from_env_cluster_and_sentinel_urls_take_the_redis_options(variable: str, url: str) -> None:
    env = {"MCP_SESSIONS_SECRET": SECRET, variable: url, "MCP_SESSIONS_REDIS_PREFIX": "t:"}
    mw = MCPSessionMiddleware.from_env(app, environ=env)  # no connection is made here
    assert isinstance(mw.store, RedisStore)
    assert mw.store.prefix == "t:"
    await mw.store.aclose()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"MCP_SESSIONS_REDIS_URL": "http://user:hunter2@example/0"},
            "MCP_SESSIONS_REDIS_URL: unknown store URL scheme",
        ),
        ({"MCP_SESSIONS_STORE": "memory://", "MCP_SESSIONS_REDIS_URL": "redis://h/0"}, "set only one"),
        ({"MCP_SESSIONS_STORE": "redis+cluster://:hunter2@h:x"}, "MCP_SESSIONS_STORE: the port of Cluster node 1"),
        ({"MCP_SESSIONS_STORE": "sqlite://x.db", "MCP_SESSIONS_REDIS_PREFIX": "p"}, "names no Redis store"),
        ({"MCP_SESSIONS_REDIS_URL": "redis://h/0", "MCP_SESSIONS_REDIS_TIMEOUT": "soon"}, "must be a number"),
        (
            {"MCP_SESSIONS_REDIS_URL": "redis://h/0", "MCP_SESSIONS_REDIS_TIMEOUT": "120"},
            "^MCP_SESSIONS_REDIS_TIMEOUT: timeout .* at most 60",
        ),
        (
            {"MCP_SESSIONS_REDIS_URL": "redis://h/0", "MCP_SESSIONS_REDIS_CONNECT_TIMEOUT": "-1"},
            "^MCP_SESSIONS_REDIS_CONNECT_TIMEOUT: connect_timeout",
        ),
        ({"MCP_SESSIONS_STORE": "sqlite://x.db", "MCP_SESSIONS_REDIS_CONNECT_TIMEOUT": "1"}, "names no Redis store"),
        (
            {"MCP_SESSIONS_REDIS_URL": "redis://h/0", "MCP_SESSIONS_REDIS_PREFIX": "{x}"},
            "^MCP_SESSIONS_REDIS_PREFIX: prefix .* without braces",
        ),
    ],
)
def test_from_env_redis_errors(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        MCPSessionMiddleware.from_env(app, environ={"MCP_SESSIONS_SECRET": SECRET, **extra})
    assert "hunter2" not in str(info.value)


def test_without_the_redis_package() -> None:
    """``import mcp_sessions`` works without redis; asking for Redis then says which extra to install."""
    script = f"""
import sys
sys.modules["redis"] = None  # as if the package were not installed
import mcp_sessions
from mcp_sessions import MCPSessionMiddleware, stores
try:
    stores.RedisStore
except ImportError as exc:
    assert "pip install 'redis>=8.1'" in str(exc), exc
else:
    raise AssertionError("RedisStore imported without redis")
env = {{"MCP_SESSIONS_SECRET": {SECRET!r}, "MCP_SESSIONS_REDIS_URL": "redis://127.0.0.1:1/0"}}
try:
    MCPSessionMiddleware.from_env(lambda *a: None, environ=env)
except RuntimeError as exc:
    assert "MCP_SESSIONS_REDIS_URL names a Redis store but the redis package is not installed" in str(exc), exc
else:
    raise AssertionError("from_env accepted MCP_SESSIONS_REDIS_URL without redis")
del env["MCP_SESSIONS_REDIS_URL"]
MCPSessionMiddleware.from_env(lambda *a: None, environ=env)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=MAIN)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def keygen(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["keygen", *argv], stdin=io.StringIO(), stdout=out, stderr=err, environ={})
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("kid", ["@k2026", "2026-11", "a.b_c~", "a$b;c'd"])
def test_the_printed_line_is_the_kid_a_server_reads(kid: str) -> None:
    code, out, _ = keygen("--kid", kid)
    [assignment] = shlex.split(out)
    name, _, value = assignment.partition("=")
    assert (code, name) == (0, "MCP_SESSIONS_KEYS")
    keys = MCPSessionMiddleware.from_env(app, environ={name: value, "MCP_SESSIONS_SIGNER": kid}).keys
    assert [key.kid for key in keys.keys] == [kid] == [signer_of(keys).kid]  # "@k2026": a kid may start with @


@pytest.mark.parametrize("kid", ["a,b", "#k", "a b", "k\u00e9", "a:b", "", "k" * 65])
def test_a_kid_the_line_would_split_or_drop_is_a_usage_error(kid: str) -> None:
    code, out, err = keygen("--kid", kid)
    assert (code, out) == (2, "")
    assert "--kid must be 1 to 64 visible ASCII characters" in err
