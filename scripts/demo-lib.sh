# demo-lib.sh — the walk-through both demos share (sourced by scripts/demo.sh
# and scripts/demo-mysql.sh; not run on its own).
#
# A demo script starts its throwaway server, then defines:
#   src_sql          runs SQL read from stdin against the demo database, echoing it
#   source_pos       prints the source's position after everything committed
#   pos_num POS      turns a position as `tidemark status` prints it into the integer
#                    tidemark stores (cdc_source_lsn)
#   POS_WORDS        how the position is written, for messages ("WAL position (LSN, X/Y)")
#   NS               the demo tables' namespace in the lake ("shop.public", "shop.shop")
# and calls run_walkthrough with the tidemark run command line (an array).
#
# Environment: DEMO_TIMEOUT seconds to wait for each step to reach the lake (default 90).

LAKE=./demo-lake
TIMEOUT=${DEMO_TIMEOUT:-90}
TM_PID=

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
# note prints an explanation, indented.
note() { printf '    %s\n' "$@"; }
die() { printf 'demo: error: %s\n' "$*" >&2; exit 1; }

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

# wait_for_lake POS: waits until every table of the lake is captured past
# the source position POS with its snapshot done, and silver has merged all
# of it: `tidemark status --format json` says so.
wait_for_lake() {
	local target json pos ok i
	target=$(pos_num "$1")
	for i in $(seq 1 $((TIMEOUT * 2))); do
		kill -0 "$TM_PID" 2>/dev/null || { wait "$TM_PID" || true; TM_PID=; die "tidemark run exited"; }
		json=$(bin/tidemark status --warehouse "$LAKE" --format json 2>/dev/null) || json=
		ok=$(grep -c '"table"' <<<"$json" || true)
		[ "$ok" -gt 0 ] || { sleep 0.5; continue; }
		for pos in $(sed -n 's/.*"position": "\(.*\)".*/\1/p' <<<"$json"); do
			[ "$(pos_num "$pos")" -ge "$target" ] || ok=0
		done
		[ "$(grep -c '"snapshot": "done"' <<<"$json")" = "$ok" ] || ok=0
		[ "$(grep -c '"silver": "published"' <<<"$json")" = "$ok" ] || ok=0
		grep -q '"silver_bronze_snapshots_behind": [1-9]' <<<"$json" && ok=0
		[ "$ok" = 0 ] || return 0
		sleep 0.5
	done
	die "the lake did not reach source position $1 within ${TIMEOUT}s (DEMO_TIMEOUT)"
}

build_tidemark() {
	say "building bin/tidemark"
	if command -v make >/dev/null 2>&1; then make -s --no-print-directory build; else go build -o bin/tidemark ./cmd/tidemark; fi
	bin/tidemark --version
}

# start_tidemark CMD...: runs tidemark in the background into $LAKE, its log
# in $TMLOG, and waits for the snapshot to reach silver.
start_tidemark() {
	rm -rf "$LAKE" # the lake belongs to the previous (now gone) demo database
	"$@" >"$TMLOG" 2>&1 &
	TM_PID=$!
	wait_for_lake "$(source_pos)"
}

# walkthrough: the changes, status, show of bronze and silver, one more
# change, verify (VERIFY_CMD, an array) and the clean stop.
walkthrough() {
	local pos rc
	say "changing the source: inserts, updates, deletes"
	src_sql <<'SQL'
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
	pos=$(source_pos)
	note "the source's $POS_WORDS is now $pos; waiting for the lake to pass it"
	wait_for_lake "$pos"

	say "tidemark status --warehouse $LAKE"
	bin/tidemark status --warehouse "$LAKE"
	note "One line per captured table. SNAPSHOT done: the existing rows (ROWS) are copied." \
		"POSITION: the source position ($POS_WORDS) the table is complete up to;" \
		"WATERMARK: the commit time of that transaction. SILVER published: the replica table exists."

	say "tidemark show --warehouse $LAKE bronze.$NS.orders   (the change log: every change, in source order)"
	bin/tidemark show --warehouse "$LAKE" "bronze.$NS.orders" --limit 20
	note "cdc_op says what each row is: r = read by the snapshot, c = insert (create), u = update" \
		"(the new row), d = delete (only the key is set), t = truncate." \
		"cdc_source_lsn is the position of the change's transaction at the source as one sortable" \
		"integer; in parentheses the same position as the source writes it ($POS_WORDS)." \
		"Rows are in source order, (cdc_source_lsn, cdc_seq): the snapshot (r) first, then the" \
		"changes. Order 4 was inserted and deleted, so it has a c and a d row."

	say "tidemark show --warehouse $LAKE silver.$NS.orders   (the replica: the table as it is now)"
	bin/tidemark show --warehouse "$LAKE" "silver.$NS.orders" --limit 20
	note "Silver applies the change log by key: one row per order, as at the source. Order 4 is gone," \
		"order 1 is shipped, order 2 paid at 179.10. tidemark run merges bronze into silver every 5s."

	say "one more change at the source, while tidemark runs"
	src_sql <<'SQL'
UPDATE orders SET status = 'shipped' WHERE id = 3;
INSERT INTO orders (customer_id, amount, status, items) VALUES (2, 64.00, 'pending', '[{"sku": "bombe", "qty": 1}]');
SQL
	wait_for_lake "$(source_pos)"

	say "tidemark show --warehouse $LAKE silver.$NS.orders   (order 3 now shipped; order 6 new)"
	bin/tidemark show --warehouse "$LAKE" "silver.$NS.orders" --limit 20

	say "tidemark verify --warehouse $LAKE"
	note "verify compares every silver table with its source table at one source position (exit 0: equal)."
	"${VERIFY_CMD[@]}"

	say "stopping tidemark (SIGTERM: it commits what it has, confirms the position to the source, exits 0)"
	rc=0
	stop_tidemark || rc=$?
	[ "$rc" = 0 ] || die "tidemark run exited with status $rc after SIGTERM"
}
