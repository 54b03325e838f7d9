"""Bearer tokens for the JSON API. A token is shown once; only its sha256 is stored.

Tokens carry 256 bits of randomness, so an unsalted sha256 is enough to make the stored
hash useless to a thief, and it lets us find the client with one indexed lookup.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from django.http import HttpRequest
from django.utils import timezone

from receipts.models import ApiClient

TOKEN_PREFIX = "idem_"
# What create_token makes: the prefix and 32 random bytes as unpadded URL-safe base64.
TOKEN_FORMAT = re.compile(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_-]{43}")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(name: str) -> tuple[ApiClient, str]:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    client = ApiClient.objects.create(name=name, token_prefix=token[:12], token_hash=hash_token(token))
    return client, token


def client_for_request(request: HttpRequest) -> ApiClient | None:
    """The API client named by `Authorization: Bearer <token>`, or None."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not TOKEN_FORMAT.fullmatch(token):
        # Not one of ours (a JWT, another app's key): it cannot match a stored hash, so
        # it costs no query. The format says nothing secret; the hash lookup still decides.
        return None
    client = ApiClient.objects.filter(token_hash=hash_token(token), revoked_at=None).first()
    if client is not None:
        # Touch at most once a minute: last-used is for humans, not worth a write per call.
        now = timezone.now()
        if client.last_used_at is None or (now - client.last_used_at).total_seconds() > 60:
            ApiClient.objects.filter(pk=client.pk).update(last_used_at=now)
    return client
