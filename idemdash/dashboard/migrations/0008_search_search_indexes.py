# The dashboard's search by business id (idemdash/dashboard/search.py), on PostgreSQL: one
# GIN index per searched table over the terms a row can be found by, so that finding an id
# among millions of rows reads a few index pages instead of every payload. Nothing on any
# other database (SQLite reads the JSON with json_tree; see search.py).
#
# They belong to the dashboard, not to the tables' apps: a host without the dashboard does
# not pay for them on every write.

from django.db import migrations

from idemdash.core.pg import build_index_concurrently

# A row's terms, as one JSON array: each key whole and each of its parts between
# separators, and every string and number anywhere in the JSON document(s). `body` is a
# stored response: text, searched when it is a JSON object or array (a body that only looks
# like one is skipped, never an error: the function runs on every write of the row).
# IMMUTABLE, as an index expression must be: the result depends on the arguments alone.
# COST 10000 (a jsonpath walk of a whole payload, against the default 100): at the default,
# a search's `LIMIT` made a sequential scan that stops at its 51st match look as cheap as
# the index (the planner guesses ~1% of rows match), and once GIN's pending list grew the
# sequential scan won; an id found nowhere then ran the function on every row (2 M events:
# past the 2 s budget; `make bench` scenario 11 saw it). At this cost the index wins at
# any table size.
TERMS_FUNCTION = r"""
CREATE OR REPLACE FUNCTION idemdash_search_terms(keys text[], doc jsonb, body text)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE COST 10000 AS $$
DECLARE
  terms jsonb := '[]';
  k text;
  parsed jsonb;
BEGIN
  FOREACH k IN ARRAY keys LOOP
    CONTINUE WHEN k IS NULL OR k = '';
    terms := terms || to_jsonb(k) || to_jsonb(regexp_split_to_array(k, '[-:/.|#,;=\s]+'));
  END LOOP;
  IF doc IS NOT NULL THEN
    terms := terms || jsonb_path_query_array(doc, 'strict $.** ? (@.type() == "string" || @.type() == "number")');
  END IF;
  IF body ~ '^\s*[\[{]' THEN
    BEGIN
      parsed := body::jsonb;
    EXCEPTION WHEN others THEN
      parsed := NULL;
    END;
    IF parsed IS NOT NULL THEN
      terms := terms || jsonb_path_query_array(parsed, 'strict $.** ? (@.type() == "string" || @.type() == "number")');
    END IF;
  END IF;
  RETURN terms;
END
$$;
"""

# (index, table, the terms expression): search.py's TERMS must say the same expressions,
# or the planner cannot use the index (tests/dashboard/test_search.py checks the plans).
INDEXES = [
    ("receipt_search", "receipts_receipt", "idemdash_search_terms(ARRAY[key]::text[], request, response_body)"),
    ("webhook_event_search", "webhooks_webhookevent",
     "idemdash_search_terms(ARRAY[provider_event_id, dedupe_key]::text[], payload, NULL::text)"),
    ("outbox_message_search", "outbox_outboxmessage", "idemdash_search_terms(ARRAY[key]::text[], payload, NULL::text)"),
]


def create(apps, schema_editor) -> None:
    """Each index built CONCURRENTLY: a host upgrading with millions of rows keeps taking
    claims, deliveries and enqueues meanwhile."""
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(TERMS_FUNCTION)
    for name, table, terms in INDEXES:
        build_index_concurrently(schema_editor, name, f"CREATE INDEX {name} ON {table} USING gin (({terms}) jsonb_path_ops)")


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, _, _ in INDEXES:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    schema_editor.execute("DROP FUNCTION IF EXISTS idemdash_search_terms(text[], jsonb, text)")


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('idemdash', '0007_concurrent_duplicates_metric'),
        ('receipts', '0012_attempt_outcome_unknown'),
        ('webhooks', '0008_demo_models_move_to_devtools'),
        ('outbox', '0006_audit_actions_named_by_their_verbs'),
    ]

    operations = [
        migrations.RunPython(create, drop, atomic=False),
    ]
