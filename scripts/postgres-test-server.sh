#!/usr/bin/env bash
# Makes this machine's PostgreSQL ready for the tests and prints the admin URL they use
# (AWC_TEST_POSTGRES_URL; test/helpers/postgres.ts). As root: installs PostgreSQL with apt-get
# when pg_ctlcluster is missing, creates a cluster when there is none, starts it, and creates
# the role awc_test (LOGIN CREATEDB, password awc_test, over TCP on 127.0.0.1: a test role on
# loopback, never a production credential). Idempotent; messages go to stderr, the URL alone to stdout.
set -euo pipefail
log() { echo "postgres-test-server: $*" >&2; }

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    log "PostgreSQL is not installed; run this script as root to install it"
    exit 1
  fi
  log "installing postgresql with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
fi

cluster() { pg_lsclusters -h | awk '$2 == "main" { print $1, $3, $4; exit }'; }
read -r ver port status <<<"$(cluster)" || true
if [ -z "${ver:-}" ]; then
  ver=$(ls /usr/lib/postgresql | sort -V | tail -1)
  log "creating the cluster $ver/main"
  pg_createcluster "$ver" main >&2
  read -r ver port status <<<"$(cluster)"
fi
if [[ "$status" != online* ]]; then
  log "starting the cluster $ver/main (pg_ctlcluster $ver main start)"
  pg_ctlcluster "$ver" main start >&2
fi

if [ "$(id -u)" = 0 ]; then
  su postgres -s /bin/sh -c "psql -p $port -qAt -v ON_ERROR_STOP=1" >&2 <<'SQL'
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'awc_test') THEN
    CREATE ROLE awc_test LOGIN CREATEDB PASSWORD 'awc_test';
  ELSE
    ALTER ROLE awc_test LOGIN CREATEDB PASSWORD 'awc_test';
  END IF;
END $$;
-- DROP DATABASE ... WITH (FORCE) ends the test database's sessions, which needs this role
GRANT pg_signal_backend TO awc_test;
SQL
else
  log "not root: assuming the role awc_test exists"
fi
echo "postgres://awc_test:awc_test@127.0.0.1:$port/postgres"
