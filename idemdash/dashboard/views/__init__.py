"""The dashboard's views, one module per page or kind; `actions` is the one action view over
every kind, `bulk` the one bulk view, `pages` what they share. Reads come from
idemdash.dashboard.queries; every action goes through its kind's domain function, which
writes the audit log."""
