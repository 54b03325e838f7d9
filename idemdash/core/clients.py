"""API clients and their bearer tokens for the JSON APIs. A token is shown once; only its
sha256 is stored.

Tokens carry 256 bits of randomness, so an unsalted sha256 is enough to make the stored
hash useless to a thief, and it lets us find the client with one indexed lookup.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from django.db import models
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from idemdash.core.problems import problem
from idemdash.core.throttle import BAD_TOKENS, client_ip


class ApiClient(models.Model):
    """A caller of the JSON API. The token is shown once; only its sha256 is stored."""

    name = models.CharField(max_length=100, unique=True)
    token_prefix = models.CharField(max_length=16, help_text="First characters, to recognise a token.")
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name

    @property
    def scope(self) -> str:
        return f"client:{self.name}"


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


def refused(request: HttpRequest, title: str, detail: str) -> HttpResponse:
    """The answer to a request that `client_for_request` found no client for: 401, or 429
    with Retry-After once its address has sent more bad tokens than
    `API_TOKEN_FAILURE_LIMIT` in the window (`idemdash/core/throttle.py`). Only a request
    that sent a token counts, and only here, after the lookup: a valid token never waits
    on the throttle, whatever other callers at its address send."""
    if request.headers.get("Authorization"):
        retry_after = BAD_TOKENS.fail(client_ip(request))
        if retry_after:
            return problem(
                429,
                "too-many-bad-tokens",
                "Too many bad tokens",
                f"Too many requests with a bad token from this address; try again in {retry_after} s.",
                headers={"Retry-After": str(retry_after)},
            )
    return problem(401, "unauthorized", title, detail, headers={"WWW-Authenticate": 'Bearer realm="idemdash"'})
