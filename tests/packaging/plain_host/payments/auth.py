from django.contrib.auth.middleware import RemoteUserMiddleware


class GatewayUserMiddleware(RemoteUserMiddleware):
    """The user the API gateway in front of the project authenticated, by its header."""

    header = "HTTP_X_AUTHENTICATED_USER"
    # Sync only, so that Django runs its sync path under ASGI too: Django 5.2's async path reads
    # META["HTTP_" + header] (6.0 reads the header as given), which found no user under uvicorn.
    async_capable = False
