package postgres_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/testenv"
)

// rowsOnly hides every method of a Writer but pipeline.Sink's: the
// snapshot then hands its chunks over as changes (WriteBatch), not as
// columnar chunks.
type rowsOnly struct{ pipeline.Sink }

// TestSnapshotRowsMatchStreamRows: a row the snapshot read lands in bronze
// exactly as the same row captured by the stream, for values of every
// common type; rows that do not decode are dead letters on both paths, and
// the rows around them keep their positions. Both ways a chunk reaches
// bronze are checked: decoded straight into Arrow arrays (bronze.Writer is
// a pipeline.ChunkSink) and as one change per row (any other Writer).
func TestSnapshotRowsMatchStreamRows(t *testing.T) {
	for _, columnar := range []bool{true, false} {
		t.Run(fmt.Sprintf("columnar=%v", columnar), func(t *testing.T) {
			testSnapshotRowsMatchStreamRows(t, columnar)
		})
	}
}

func testSnapshotRowsMatchStreamRows(t *testing.T, columnar bool) {
	pg := testenv.Shared(t)
	h := newHarness(t, pg, `
		CREATE TYPE mood AS ENUM ('happy', 'sad');
		CREATE TABLE v (id int PRIMARY KEY, i2 smallint, i8 bigint, r real, d double precision, n numeric(10,2), nn numeric,
			b boolean, t text, vc varchar(5), c char(3), by bytea, dt date, tm time, ts timestamp, tz timestamptz,
			j jsonb, u uuid, m mood, ia int[], ta text[], na numeric(5,1)[], iv interval);
		INSERT INTO v SELECT g, (g % 100)::smallint, g::bigint * 1000000007, g / 7.0, g / 3.0,
			CASE WHEN g % 9 = 4 THEN 'NaN' ELSE (g * 1.25)::numeric(10,2) END, g / 11.0,
			g % 2 = 0, CASE WHEN g % 5 = 0 THEN NULL ELSE 'text ' || g || ' é' END, left(md5(g::text), 5), 'ab',
			decode(md5(g::text), 'hex'), '2024-01-01'::date + g, '12:34:56.789'::time + g * interval '1 second',
			'2024-01-01 00:00:00'::timestamp + g * interval '1 minute', '2024-01-01 00:00:00+00'::timestamptz + g * interval '1 hour',
			jsonb_build_object('g', g, 'a', jsonb_build_array(g, 'x')), md5(g::text)::uuid,
			CASE WHEN g % 2 = 0 THEN 'happy' ELSE 'sad' END::mood,
			ARRAY[g, NULL, -g], ARRAY['a' || g, 'b,c', NULL], ARRAY[g / 10.0, NULL]::numeric(5,1)[], g * interval '1 day 2 hours'
		FROM generate_series(1, 50) g;`)
	opts := h.opts()
	opts.Snapshot.ChunkRows = 7 // several chunks, with dead letters inside them
	var r *running
	if columnar {
		r = h.start(opts)
	} else {
		r = h.startWith(opts, func(w pipeline.Sink) pipeline.Sink { return rowsOnly{w} })
	}
	h.waitCaughtUp(r)
	// The same rows again, under keys 1000 higher, through the stream.
	h.exec(`CREATE TEMP TABLE copy AS SELECT * FROM v; UPDATE copy SET id = id + 1000; INSERT INTO v SELECT * FROM copy; DROP TABLE copy`)
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	rows := h.rows(bronzeIdent("v")...)
	snap, stream := map[string]string{}, map[string]string{}
	seqs := map[int64][]int64{} // snapshot positions: LSN -> seqs
	for _, row := range rows {
		id := row["id"].(int32)
		var vals []string
		for k, v := range row {
			if !strings.HasPrefix(k, "cdc_") && k != "id" {
				vals = append(vals, fmt.Sprintf("%s=%v", k, v))
			}
		}
		sort.Strings(vals)
		text := strings.Join(vals, " ")
		switch row["cdc_op"] {
		case "r":
			snap[fmt.Sprint(id)] = text
			seqs[row["cdc_source_lsn"].(int64)] = append(seqs[row["cdc_source_lsn"].(int64)], row["cdc_seq"].(int64))
		case "c":
			stream[fmt.Sprint(id-1000)] = text
		default:
			t.Errorf("unexpected %v row for id %d", row["cdc_op"], id)
		}
	}
	const good = 50 - 6 // ids 4, 13, 22, 31, 40, 49 hold a NaN numeric(10,2)
	if len(snap) != good || len(stream) != good {
		t.Fatalf("snapshot rows %d, stream rows %d, want %d each", len(snap), len(stream), good)
	}
	for id, want := range stream {
		if got := snap[id]; got != want {
			t.Errorf("id %s: the snapshot read\n  %s\nthe stream captured\n  %s", id, got, want)
		}
	}
	dead := h.rows("bronze", "src", "_dead_letter")
	var deadSnap int
	for _, d := range dead {
		if d["cdc_op"] == "r" {
			deadSnap++
			seqs[d["cdc_source_lsn"].(int64)] = append(seqs[d["cdc_source_lsn"].(int64)], d["cdc_seq"].(int64))
		}
		if !strings.Contains(fmt.Sprint(d["raw"]), `"NaN"`) {
			t.Errorf("dead letter without its NaN: %v", d)
		}
	}
	if deadSnap != 6 || len(dead) != 12 {
		t.Errorf("dead letters: %d from the snapshot, %d in all; want 6 and 12", deadSnap, len(dead))
	}
	// Each chunk numbers its rows read 1..n, dead letters included.
	for lsn, ss := range seqs {
		sort.Slice(ss, func(i, j int) bool { return ss[i] < ss[j] })
		for i, s := range ss {
			if s != int64(i+1) {
				t.Errorf("chunk at LSN %d: seqs %v, want 1..%d", lsn, ss, len(ss))
				break
			}
		}
	}
}
