package silver

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark/tidemark/internal/lake"
)

// readPriorsAt reads whole the silver rows at ids (rows of keys marked
// whole, or holding duplicates, as the position scan of live found them:
// byID says whose) and makes each the prior of its key when it is the row
// the position scan chose (same position columns). It reads only the data
// files, and row groups, that hold them: the cost of a merge whose changes
// leave TOAST columns unchanged follows the rows it changes, not silver's
// size (issue 22: a read of silver by key filter decoded every data file's
// every column, seconds per merge step once silver had grown). A chosen row
// not found means silver changed between the reads: a commit conflict.
func (in *input) readPriorsAt(ctx context.Context, s lake.KeyedTable, live lake.LiveRows, ids []lake.RowID, byID map[lake.RowID]*keyed) error {
	var cols []string
	for _, f := range s.ArrowSchema().Fields() {
		cols = append(cols, f.Name)
	}
	err := s.ReadLiveRows(ctx, live, ids, cols, func(rec arrow.RecordBatch, rids []lake.RowID) error {
		lsns, _ := column(rec, ColLSN).(*array.Int64)
		seqs, _ := column(rec, ColSeq).(*array.Int64)
		if lsns == nil || seqs == nil {
			return fmt.Errorf("silver rows lack %s or %s", ColLSN, ColSeq)
		}
		first := -1
		for i, id := range rids {
			k := byID[id]
			if k == nil || k.prior == nil || k.prior.ref >= 0 || k.prior.pos != (pos{lsns.Value(i), seqs.Value(i)}) {
				continue
			}
			if first < 0 {
				first = in.add(rec)
			}
			k.prior.ref = first + i
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := range in.keys.all {
		if kd := &in.keys.all[i]; kd.prior != nil && kd.prior.ref < 0 && (kd.whole || len(kd.rows) > 1) {
			return fmt.Errorf("%w: a silver row found by position was not read whole (the table changed meanwhile)", lake.ErrCommitConflict)
		}
	}
	return nil
}
