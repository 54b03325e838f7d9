from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def percent(fraction: float | None) -> str:
    """0.125 -> '12.5%': the duplicate rate as people read it (the JSON keeps the fraction)."""
    if fraction is None:
        return "–"
    text = f"{fraction * 100:.2f}".rstrip("0").rstrip(".")
    return f"{text}%"
