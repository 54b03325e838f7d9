"""The dashboard's views, one module per page or kind: `overview`, `receipts`, `events`
(with rejected deliveries), `outbox`, `stuck`, `audit`, `alerts`, `machine` (/api/v1/stats,
/metrics); `actions` (the one action view over every kind) and `bulk` (the one bulk view);
`pages`, what they share. Reads come from idemdash.dashboard.queries; every action goes
through its kind's domain function, which writes the audit log."""
