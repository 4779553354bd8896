package silver_test

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/silver"
)

// TestChangeOlderThanASilverFilesNewestRow: a merge reads a silver row's
// position columns unless every change it merges is newer than anything
// the row's data file holds (by the file's statistics). Here a change is
// newer than its key's row but older than another row of the same data
// file: it is applied, not taken for one already merged; the other key's
// change, older than that key's row, is ignored.
func TestChangeOlderThanASilverFilesNewestRow(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{Buckets: -1}) // one data file per commit
	e.tx(ordersID, s, snapDone, "r 1 a A")     // LSN 1100
	e.merge(m, ordersID)

	// One silver data file holds 7 at LSN 1150 and 8 at LSN 5000 (rows
	// positioned after bronze's, as a replayed range may leave them).
	tbl, err := e.cat.LoadTable(e.ctx, silverIdent(ordersID))
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, tbl.ArrowSchema())
	defer b.Release()
	for _, r := range []struct {
		id     int32
		v, big string
		lsn    int64
	}{{7, "g", "G", 1150}, {8, "h", "H", 5000}} {
		for i, f := range tbl.ArrowSchema().Fields() {
			switch fb := b.Field(i).(type) {
			case *array.Int32Builder:
				fb.Append(r.id)
			case *array.StringBuilder:
				fb.Append(map[string]string{"v": r.v, "big": r.big}[f.Name])
			case *array.Int64Builder:
				fb.Append(map[string]int64{silver.ColLSN: r.lsn, silver.ColSeq: 1}[f.Name])
			case *array.TimestampBuilder:
				fb.Append(arrow.Timestamp(time.Unix(r.lsn, 0).UnixMicro()))
			default:
				fb.AppendNull()
			}
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	props := map[string]string{}
	for k, v := range e.summary(silverIdent(ordersID)) {
		if k == silver.PropBronzeSnapshot || k == silver.PropPosition || k == silver.PropWatermark {
			props[k] = v
		}
	}
	if err := tbl.Append(e.ctx, []arrow.RecordBatch{rec}, props); err != nil {
		t.Fatal(err)
	}

	e.tx(ordersID, s, nil, "u 7 g2 G2", "u 8 h0 H0") // LSN 1200
	res := e.merge(m, ordersID)
	if res.Upserts != 1 || res.Ignored != 1 {
		t.Errorf("merge result %+v: want 7's change applied, 8's ignored (older than 8's row)", res)
	}
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{
		"id=1 v=a big=A", "id=7 v=g2 big=G2", "id=8 v=h big=H"})
}
