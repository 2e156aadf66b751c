#!/bin/sh
# One-shot (admin-tools image): creates Temporal's two databases on its PostgreSQL and brings their
# schemas to the versions this server image ships. Safe to run again: existing databases are kept
# and the schema update applies only what is missing.
set -eu
: "${POSTGRES_SEEDS:?}" "${POSTGRES_USER:?}" "${SQL_PASSWORD:?}"
until nc -z "$POSTGRES_SEEDS" 5432; do echo "waiting for PostgreSQL at $POSTGRES_SEEDS:5432"; sleep 1; done
tool() { temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -u "$POSTGRES_USER" -p 5432 "$@"; }
for db in temporal temporal_visibility; do
  tool --db "$db" create || echo "database $db exists"
done
tool --db temporal setup-schema -v 0.0 || true
tool --db temporal update-schema -d /etc/temporal/schema/postgresql/v12/temporal/versioned
tool --db temporal_visibility setup-schema -v 0.0 || true
tool --db temporal_visibility update-schema -d /etc/temporal/schema/postgresql/v12/visibility/versioned
echo "Temporal schemas are up to date"
