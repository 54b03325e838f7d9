# Moved to idemdash.core.clients; kept for one release.
from idemdash.core.clients import (  # noqa: F401
    TOKEN_FORMAT,
    TOKEN_PREFIX,
    ApiClient,
    client_for_request,
    create_token,
    hash_token,
)
