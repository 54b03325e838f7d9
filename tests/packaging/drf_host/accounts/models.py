from django.contrib.auth.models import AbstractUser
from django.db import models


class User(AbstractUser):
    """The shop's user from day one, as Django's docs recommend for a new project."""

    display_name = models.CharField(max_length=100, blank=True)
