"""Who is asking at the gateway, and what they may carry to a server.

``_users`` decides who asks (``GatewayAuth``: a JWT verified against the issuer's keys, or an auth proxy's header)
and puts each user's credentials in their own process (``ProcessEnv``); ``_exchange`` exchanges a user's token for
the upstream's (RFC 8693), the gateway authenticated there as ``_client`` says (a secret, or ``private_key_jwt``);
``_expiry`` ends an answer with the token that let its request in.
"""
