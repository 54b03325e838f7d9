"""Webhook endpoints, deliveries and events (filled in by the webhooks issue)."""
