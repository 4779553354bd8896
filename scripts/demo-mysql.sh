#!/usr/bin/env bash
# demo-mysql.sh — the demo of scripts/demo.sh on MariaDB: `make demo SOURCE=mysql`.
#
# Starts a throwaway MariaDB (mariadb-install-db into a temp dir, mariadbd on
# a random port as the OS user mysql when run as root, ROW binlog with full
# row images and metadata, GTID strict mode: what tidemark's MySQL source
# needs, as internal/testenv sets it up), creates a `shop` database with a
# few rows and a capture user with exactly the documented privileges, runs
# `tidemark run` into ./demo-lake and walks through the same steps as the
# PostgreSQL demo: the snapshot, inserts/updates/deletes in the bronze
# change log, the silver replica, one more change arriving in silver. It
# stops what it started; everything but ./demo-lake is removed on exit.
#
# Environment:
#   TIDEMARK_MARIADB_BIN  directory holding mariadbd (otherwise $PATH, then /usr/sbin)
#   DEMO_TIMEOUT          seconds to wait for each step to reach the lake (default 90)
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/demo-lib.sh
. scripts/demo-lib.sh

# --- find MariaDB -----------------------------------------------------------------
find_mariadb_bin() {
	if [ -n "${TIDEMARK_MARIADB_BIN:-}" ]; then echo "$TIDEMARK_MARIADB_BIN"; return; fi
	if command -v mariadbd >/dev/null 2>&1; then dirname "$(command -v mariadbd)"; return; fi
	if [ -x /usr/sbin/mariadbd ]; then echo /usr/sbin; return; fi
	return 1
}
MYBIN=$(find_mariadb_bin) || die "MariaDB server binaries (mariadbd) not found: run scripts/setup-test-env.sh or set TIDEMARK_MARIADB_BIN"
[ -x "$MYBIN/mariadbd" ] || die "no mariadbd in $MYBIN"
INSTALL_DB=$(command -v mariadb-install-db || echo /usr/bin/mariadb-install-db)
[ -x "$INSTALL_DB" ] || die "mariadb-install-db not found"
CLIENT=$(command -v mariadb || echo /usr/bin/mariadb)
[ -x "$CLIENT" ] || die "the mariadb client not found"

# As root the server runs as mysql, which must own the directory.
if [ "$(id -u)" = 0 ]; then TMPBASE=/tmp; else TMPBASE=${TMPDIR:-/tmp}; fi
TMP=$(mktemp -d "$TMPBASE/tidemark-demo-mysql-XXXXXX")
chmod 755 "$TMP"
DATA="$TMP/data"
SOCK="$TMP/mysqld.sock"
MYLOG="$TMP/mariadb.log"
TMLOG="$TMP/tidemark.log"
MY_PID=

stop_mariadb() {
	local i
	kill -TERM "$MY_PID" 2>/dev/null || true
	for i in $(seq 1 600); do
		kill -0 "$MY_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$MY_PID" 2>/dev/null || true
	wait "$MY_PID" 2>/dev/null || true
	MY_PID=
}

cleanup() {
	local rc=$?
	set +e
	[ -n "$TM_PID" ] && stop_tidemark
	if [ "$rc" != 0 ]; then
		[ -s "$TMLOG" ] && { echo "--- tidemark log (tail) ---"; tail -n 40 "$TMLOG"; }
		[ -s "$MYLOG" ] && { echo "--- mariadb log (tail) ---"; tail -n 20 "$MYLOG"; }
	fi
	[ -n "$MY_PID" ] && stop_mariadb
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- start MariaDB ------------------------------------------------------------------
PORT=$(free_port) || die "no free port found"
PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
USER_ARG=()
if [ "$(id -u)" = 0 ]; then
	USER_ARG=(--user=mysql)
	mkdir -p "$TMP/tmp"
	chown -R mysql: "$TMP"
else
	mkdir -p "$TMP/tmp"
fi

say "starting MariaDB ($("$MYBIN/mariadbd" --version | awk '{print $3}')) on 127.0.0.1:$PORT in $TMP"
"$INSTALL_DB" --no-defaults --datadir="$DATA" --auth-root-authentication-method=normal --skip-test-db \
	--skip-name-resolve --tmpdir="$TMP/tmp" "${USER_ARG[@]}" >"$TMP/install.log" 2>&1 ||
	{ cat "$TMP/install.log"; die "mariadb-install-db failed"; }
cat >"$TMP/my.cnf" <<EOF
# tidemark demo: what tidemark's MySQL source needs (docs/operations.md)
[mariadbd]
datadir = $DATA
socket = $SOCK
port = $PORT
bind_address = 127.0.0.1
log_error = $MYLOG
tmpdir = $TMP/tmp
server_id = 1
log_bin = mysql-bin
binlog_format = ROW
binlog_row_image = FULL
binlog_row_metadata = FULL
gtid_strict_mode = ON
character_set_server = utf8mb4
collation_server = utf8mb4_unicode_ci
innodb_buffer_pool_size = 64M
innodb_flush_log_at_trx_commit = 2
sync_binlog = 0
performance_schema = OFF
skip_name_resolve = ON
default_time_zone = +00:00
EOF
[ "$(id -u)" = 0 ] && { echo "user = mysql" >>"$TMP/my.cnf"; chown mysql: "$TMP/my.cnf"; }
"$MYBIN/mariadbd" --defaults-file="$TMP/my.cnf" >/dev/null 2>&1 &
MY_PID=$!
for i in $(seq 1 600); do
	kill -0 "$MY_PID" 2>/dev/null || die "mariadbd exited during start"
	"$CLIENT" --no-defaults -S "$SOCK" -uroot -e 'SELECT 1' >/dev/null 2>&1 && break
	[ "$i" = 600 ] && die "MariaDB did not start within 60s"
	sleep 0.1
done

# root over the socket (no password: only this OS user can reach it).
sql_root() { "$CLIENT" --no-defaults -S "$SOCK" -uroot "$@"; }
sql_shop() { sql_root -D shop "$@"; }

sql_root <<EOF
SET sql_log_bin = 0;
DELETE FROM mysql.global_priv WHERE User = '';
FLUSH PRIVILEGES;
CREATE USER 'tidemark'@'%' IDENTIFIED BY '$PASSWORD';
GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'tidemark'@'%';
SET sql_log_bin = 1;
CREATE DATABASE shop;
EOF
note "capture user tidemark: REPLICATION SLAVE, BINLOG MONITOR (= REPLICATION CLIENT), SELECT"

say "creating shop.customers and shop.orders with sample rows"
sql_shop <<'SQL'
CREATE TABLE customers (
  id         INT AUTO_INCREMENT PRIMARY KEY,
  name       VARCHAR(100),
  email      VARCHAR(200),
  created_at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6)
);
CREATE TABLE orders (
  id          BIGINT AUTO_INCREMENT PRIMARY KEY,
  customer_id INT,
  amount      DECIMAL(12,2),
  status      VARCHAR(20),
  items       JSON
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

# --- waiting for the lake -------------------------------------------------------------
# pos_num turns a binlog position as status prints it (000007:1234, or
# mysql-bin.000007:1234) into tidemark's commit-position integer:
# file index << 32 | offset.
pos_num() {
	local f=${1%:*} p=${1##*:}
	f=${f##*.}
	case "$1" in
	*:*) echo $(((10#$f << 32) + 10#$p)) ;;
	*) echo 0 ;;
	esac
}

# source_pos prints the binlog end (file:pos) after everything committed.
source_pos() { sql_root -N -B -e 'SHOW MASTER STATUS' | awk '{print $1 ":" $2}'; }

# --- run tidemark -----------------------------------------------------------------------
src_sql() { sql_shop -v -t; }
POS_WORDS="binlog position (file index:offset)"
NS=shop.shop
export TIDEMARK_SOURCE="mysql://tidemark:$PASSWORD@127.0.0.1:$PORT/shop"
VERIFY_CMD=(bin/tidemark verify --warehouse "$LAKE")

build_tidemark
say "TIDEMARK_SOURCE=mysql://tidemark:***@127.0.0.1:$PORT/shop tidemark run --warehouse $LAKE   (in the background)"
note "tidemark checks the server's binlog settings and the user's privileges, copies the rows" \
	"that exist now in primary-key chunks (the snapshot, reconciled with the binlog by" \
	"watermarks, no lock), and from then on reads every committed change from the binlog." \
	"The source URL is given by TIDEMARK_SOURCE, so its password is not in the process list."
start_tidemark bin/tidemark run --warehouse "$LAKE"
walkthrough

say "done: the lake is in $LAKE (MariaDB and its temp dir are removed)"
note "Look around: bin/tidemark status --warehouse $LAKE" \
	"            bin/tidemark show --warehouse $LAKE bronze.shop.shop.customers"
