#!/usr/bin/env bash
# demo.sh — tidemark end to end on this machine, with nothing to configure.
#
# Starts a throwaway PostgreSQL (wal_level=logical, random port, temp dir),
# creates a `shop` database with a few rows, runs `tidemark run` into
# ./demo-lake, and walks through what change data capture gives you: the
# existing rows copied (the snapshot), inserts/updates/deletes captured into
# the bronze change log, the silver replica that holds the tables as they are
# now, one more change at the source appearing in silver, and `tidemark
# verify` proving silver equals the source. Everything but ./demo-lake is
# removed on exit; explore it afterwards with
#   bin/tidemark status --warehouse ./demo-lake
#   bin/tidemark show --warehouse ./demo-lake bronze.shop.public.orders
#
# `scripts/demo.sh mysql` (`make demo SOURCE=mysql`) runs the same demo on a
# throwaway MariaDB instead: scripts/demo-mysql.sh.
#
# Environment:
#   TIDEMARK_PG_BIN   directory holding initdb/pg_ctl (otherwise found like the tests do)
#   DEMO_TIMEOUT      seconds to wait for each step to reach the lake (default 90)
set -euo pipefail

case "${1:-postgres}" in
postgres | postgresql | pg) ;;
mysql | mariadb) exec bash "$(dirname "$0")/demo-mysql.sh" ;;
*)
	echo "demo: unknown source ${1} (want postgres or mysql)" >&2
	exit 2
	;;
esac

cd "$(dirname "$0")/.."
# shellcheck source=scripts/demo-lib.sh
. scripts/demo-lib.sh

# --- find PostgreSQL ----------------------------------------------------------
find_pg_bin() {
	local d
	if [ -n "${TIDEMARK_PG_BIN:-}" ]; then echo "$TIDEMARK_PG_BIN"; return; fi
	if command -v pg_config >/dev/null 2>&1; then
		d=$(pg_config --bindir 2>/dev/null || true)
		if [ -n "$d" ] && [ -x "$d/initdb" ]; then echo "$d"; return; fi
	fi
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5n | tail -n1 || true)
	if [ -n "$d" ] && [ -x "$d/initdb" ]; then echo "$d"; return; fi
	if command -v initdb >/dev/null 2>&1; then dirname "$(readlink -f "$(command -v initdb)")"; return; fi
	return 1
}
PGBIN=$(find_pg_bin) || die "PostgreSQL server binaries not found: run scripts/setup-test-env.sh or set TIDEMARK_PG_BIN"
[ -x "$PGBIN/initdb" ] || die "no initdb in $PGBIN"

# PostgreSQL refuses to run as root: run it as the OS user postgres then.
as_pg() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# As root the server runs as postgres, which must be able to reach the dir.
if [ "$(id -u)" = 0 ]; then TMPBASE=/tmp; else TMPBASE=${TMPDIR:-/tmp}; fi
TMP=$(mktemp -d "$TMPBASE/tidemark-demo-XXXXXX")
chmod 755 "$TMP"
DATA="$TMP/data"
PGLOG="$TMP/postgres.log"
TMLOG="$TMP/tidemark.log"

cleanup() {
	local rc=$?
	set +e
	[ -n "$TM_PID" ] && stop_tidemark
	if [ "$rc" != 0 ]; then
		[ -s "$TMLOG" ] && { echo "--- tidemark log (tail) ---"; tail -n 40 "$TMLOG"; }
		[ -s "$PGLOG" ] && { echo "--- postgres log (tail) ---"; tail -n 20 "$PGLOG"; }
	fi
	if [ -f "$DATA/postmaster.pid" ]; then
		(cd "$TMP" && as_pg "$PGBIN/pg_ctl" stop -D "$DATA" -m fast -w -s) >/dev/null 2>&1
	fi
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- start PostgreSQL -----------------------------------------------------------
PORT=$(free_port) || die "no free port found"
PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
SOURCE="postgres://postgres:$PASSWORD@127.0.0.1:$PORT/shop?sslmode=disable"

say "starting PostgreSQL ($("$PGBIN/postgres" --version | awk '{print $3}')) on 127.0.0.1:$PORT in $TMP"
printf '%s\n' "$PASSWORD" >"$TMP/pwfile"
chmod 600 "$TMP/pwfile"
[ "$(id -u)" = 0 ] && chown -R postgres: "$TMP"
(cd "$TMP" && as_pg "$PGBIN/initdb" -D "$DATA" -U postgres --pwfile="$TMP/pwfile" \
	--auth-host=scram-sha-256 --auth-local=trust --no-locale --encoding=UTF8 --no-sync) >"$TMP/initdb.log" 2>&1 ||
	{ cat "$TMP/initdb.log"; die "initdb failed"; }
rm -f "$TMP/pwfile"
as_pg tee -a "$DATA/postgresql.conf" >/dev/null <<EOF

# tidemark demo
wal_level = logical
max_replication_slots = 10
max_wal_senders = 10
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DATA'
fsync = off
synchronous_commit = off
EOF
as_pg tee "$DATA/pg_hba.conf" >/dev/null <<'EOF'
local all         all                trust
local replication all                trust
host  all         all  127.0.0.1/32  scram-sha-256
host  replication all  127.0.0.1/32  scram-sha-256
EOF
(cd "$TMP" && as_pg "$PGBIN/pg_ctl" start -D "$DATA" -l "$PGLOG" -w -s -t 60) || die "PostgreSQL did not start"

psql_shop() { PGPASSWORD=$PASSWORD "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres -d shop "$@"; }

PGPASSWORD=$PASSWORD "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres -d postgres \
	-c 'CREATE DATABASE shop'
say "creating shop.customers and shop.orders with sample rows"
psql_shop <<'SQL'
CREATE TABLE customers (
  id         serial PRIMARY KEY,
  name       text,
  email      text,
  created_at timestamptz DEFAULT now()
);
CREATE TABLE orders (
  id          bigserial PRIMARY KEY,
  customer_id int,
  amount      numeric(12,2),
  status      text,
  items       jsonb
);
INSERT INTO customers (name, email) VALUES
  ('Ada Lovelace',  'ada@example.com'),
  ('Alan Turing',   'alan@example.com'),
  ('Grace Hopper',  'grace@example.com');
INSERT INTO orders (customer_id, amount, status, items) VALUES
  (1,  42.50, 'paid',    '[{"sku": "tea",    "qty": 2}]'),
  (2, 199.00, 'pending', '[{"sku": "enigma", "qty": 1}]'),
  (3,  12.99, 'paid',    '[{"sku": "cobol",  "qty": 3}, {"sku": "moth", "qty": 1}]');
SQL

# --- waiting for the lake -------------------------------------------------------
# lsn_num turns PostgreSQL's X/Y notation of a WAL position (LSN) into the
# integer it stands for: X is the high 32 bits, Y the low ones, both hex.
lsn_num() {
	case "$1" in
	*/*) echo $(((16#${1%/*} << 32) + 16#${1#*/})) ;;
	*) echo 0 ;;
	esac
}

# The insert position: with synchronous_commit = off, pg_current_wal_lsn() can
# be behind a commit that has returned.
source_pos() { psql_shop -At -c 'SELECT pg_current_wal_insert_lsn()'; }

# --- run tidemark -----------------------------------------------------------------
src_sql() { psql_shop -e; }
pos_num() { lsn_num "$1"; }
POS_WORDS="WAL position (an LSN, X/Y in hex)"
NS=shop.public
# The source URL holds a password: it goes by the environment, not on the
# command line where every user of the machine could read it (ps).
export TIDEMARK_SOURCE="$SOURCE"
VERIFY_CMD=(bin/tidemark verify --warehouse "$LAKE")

build_tidemark
say "TIDEMARK_SOURCE=postgres://postgres:***@127.0.0.1:$PORT/shop tidemark run --warehouse $LAKE   (in the background; its log is printed if anything fails)"
note "tidemark creates a replication slot and a publication in PostgreSQL, copies the rows that" \
	"exist now (the snapshot), and from then on receives every committed change from the slot."
start_tidemark bin/tidemark run --warehouse "$LAKE"
walkthrough

say "done: the lake is in $LAKE (PostgreSQL and its temp dir are removed)"
note "Look around: bin/tidemark status --warehouse $LAKE" \
	"            bin/tidemark show --warehouse $LAKE bronze.shop.public.customers" \
	"Read it with any Iceberg reader (docs/bronze.md: PyIceberg); next: README.md, docs/operations.md."
