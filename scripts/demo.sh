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
LAKE=./demo-lake
TIMEOUT=${DEMO_TIMEOUT:-90}

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
# note prints an explanation, indented.
note() { printf '    %s\n' "$@"; }
die() { printf 'demo: error: %s\n' "$*" >&2; exit 1; }

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

# free_port prints a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
	local port i
	for i in $(seq 1 100); do
		port=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	return 1
}

# As root the server runs as postgres, which must be able to reach the dir.
if [ "$(id -u)" = 0 ]; then TMPBASE=/tmp; else TMPBASE=${TMPDIR:-/tmp}; fi
TMP=$(mktemp -d "$TMPBASE/tidemark-demo-XXXXXX")
chmod 755 "$TMP"
DATA="$TMP/data"
PGLOG="$TMP/postgres.log"
TMLOG="$TMP/tidemark.log"
TM_PID=

# stop_tidemark sends SIGTERM, waits up to 30s (then SIGKILL) and returns
# tidemark's exit status.
stop_tidemark() {
	local i rc=0
	kill -TERM "$TM_PID" 2>/dev/null || true
	for i in $(seq 1 300); do
		kill -0 "$TM_PID" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$TM_PID" 2>/dev/null; then
		echo "demo: tidemark did not exit 30s after SIGTERM; killing it" >&2
		kill -KILL "$TM_PID" 2>/dev/null || true
	fi
	wait "$TM_PID" || rc=$?
	TM_PID=
	return "$rc"
}

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

# wait_for_lake LSN: waits until every table of the lake is captured past
# the source position LSN (X/Y) with its snapshot done, and silver has merged
# all of it: `tidemark status --format json` says so.
wait_for_lake() {
	local target json pos ok i
	target=$(lsn_num "$1")
	for i in $(seq 1 $((TIMEOUT * 2))); do
		kill -0 "$TM_PID" 2>/dev/null || { wait "$TM_PID" || true; TM_PID=; die "tidemark run exited"; }
		json=$(bin/tidemark status --warehouse "$LAKE" --format json 2>/dev/null) || json=
		ok=$(grep -c '"table"' <<<"$json" || true)
		[ "$ok" -gt 0 ] || { sleep 0.5; continue; }
		for pos in $(sed -n 's/.*"position": "\(.*\)".*/\1/p' <<<"$json"); do
			[ "$(lsn_num "$pos")" -ge "$target" ] || ok=0
		done
		[ "$(grep -c '"snapshot": "done"' <<<"$json")" = "$ok" ] || ok=0
		[ "$(grep -c '"silver": "published"' <<<"$json")" = "$ok" ] || ok=0
		grep -q '"silver_bronze_snapshots_behind": [1-9]' <<<"$json" && ok=0
		[ "$ok" = 0 ] || return 0
		sleep 0.5
	done
	die "the lake did not reach source position $1 within ${TIMEOUT}s (DEMO_TIMEOUT)"
}

# The insert position: with synchronous_commit = off, pg_current_wal_lsn() can
# be behind a commit that has returned.
source_lsn() { psql_shop -At -c 'SELECT pg_current_wal_insert_lsn()'; }

# --- run tidemark -----------------------------------------------------------------
say "building bin/tidemark"
if command -v make >/dev/null 2>&1; then make -s --no-print-directory build; else go build -o bin/tidemark ./cmd/tidemark; fi
bin/tidemark --version

rm -rf "$LAKE" # the lake belongs to the previous (now gone) demo database
say "tidemark run --source postgres://postgres:***@127.0.0.1:$PORT/shop --warehouse $LAKE   (in the background; its log is printed if anything fails)"
note "tidemark creates a replication slot and a publication in PostgreSQL, copies the rows that" \
	"exist now (the snapshot), and from then on receives every committed change from the slot."
bin/tidemark run --source "$SOURCE" --warehouse "$LAKE" >"$TMLOG" 2>&1 &
TM_PID=$!
wait_for_lake "$(source_lsn)"

say "changing the source: inserts, updates, deletes"
psql_shop -e <<'SQL'
INSERT INTO customers (name, email) VALUES ('Edsger Dijkstra', 'edsger@example.com');
INSERT INTO orders (customer_id, amount, status, items) VALUES
  (4, 7.00, 'pending', '{"sku": "goto", "qty": 0}'),
  (1, 310.25, 'pending', '[{"sku": "engine", "qty": 1}]');
BEGIN;
UPDATE orders SET status = 'shipped' WHERE id = 1;
UPDATE orders SET amount = amount * 0.9, status = 'paid' WHERE id = 2;
COMMIT;
UPDATE customers SET email = 'grace.hopper@example.com' WHERE id = 3;
DELETE FROM orders WHERE id = 4;
SQL
LSN=$(source_lsn)
note "PostgreSQL's WAL position is now $LSN (an LSN, written X/Y in hex); waiting for the lake to pass it"
wait_for_lake "$LSN"

say "tidemark status --warehouse $LAKE"
bin/tidemark status --warehouse "$LAKE"
note "One line per captured table. SNAPSHOT done: the existing rows (ROWS) are copied." \
	"POSITION: the source position the table is complete up to, in PostgreSQL's X/Y notation;" \
	"WATERMARK: the commit time of that transaction. SILVER published: the replica table exists."

say "tidemark show --warehouse $LAKE bronze.shop.public.orders   (the change log: every change, in source order)"
bin/tidemark show --warehouse "$LAKE" bronze.shop.public.orders --limit 20
note "cdc_op says what each row is: r = read by the snapshot, c = insert (create), u = update" \
	"(the new row), d = delete (only the key is set), t = truncate." \
	"cdc_source_lsn is the position of the change's transaction at the source: the lake stores" \
	"it as an integer; in parentheses the same position in PostgreSQL's X/Y notation, as status" \
	"prints it. Rows are in source order, (cdc_source_lsn, cdc_seq): the snapshot (r) first," \
	"then the changes. Order 4 was inserted and deleted, so it has a c and a d row."

say "tidemark show --warehouse $LAKE silver.shop.public.orders   (the replica: the table as it is now)"
bin/tidemark show --warehouse "$LAKE" silver.shop.public.orders --limit 20
note "Silver applies the change log by key: one row per order, as at the source. Order 4 is gone," \
	"order 1 is shipped, order 2 paid at 179.10. tidemark run merges bronze into silver every 5s."

say "one more change at the source, while tidemark runs"
psql_shop -e <<'SQL'
UPDATE orders SET status = 'shipped' WHERE id = 3;
INSERT INTO orders (customer_id, amount, status, items) VALUES (2, 64.00, 'pending', '[{"sku": "bombe", "qty": 1}]');
SQL
LSN=$(source_lsn)
wait_for_lake "$LSN"

say "tidemark show --warehouse $LAKE silver.shop.public.orders   (order 3 now shipped; order 6 new)"
bin/tidemark show --warehouse "$LAKE" silver.shop.public.orders --limit 20

say "tidemark verify --source postgres://postgres:***@127.0.0.1:$PORT/shop --warehouse $LAKE"
note "verify compares every silver table with its source table at one source position (exit 0: equal)."
bin/tidemark verify --source "$SOURCE" --warehouse "$LAKE"

say "stopping tidemark (SIGTERM: it commits what it has, confirms the position to PostgreSQL, exits 0)"
rc=0
stop_tidemark || rc=$?
[ "$rc" = 0 ] || die "tidemark run exited with status $rc after SIGTERM"

say "done: the lake is in $LAKE (PostgreSQL and its temp dir are removed)"
note "Look around: bin/tidemark status --warehouse $LAKE" \
	"            bin/tidemark show --warehouse $LAKE bronze.shop.public.customers" \
	"Read it with any Iceberg reader (docs/bronze.md: PyIceberg); next: README.md, docs/operations.md."
