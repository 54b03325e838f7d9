from django.contrib.auth.middleware import RemoteUserMiddleware


class GatewayUserMiddleware(RemoteUserMiddleware):
    """The user the API gateway in front of the project authenticated, by its header."""

    header = "HTTP_X_AUTHENTICATED_USER"
