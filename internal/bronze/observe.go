package bronze

import (
	"strconv"
	"time"

	"github.com/tidemark/tidemark/internal/change"
)

// Observer is told what a Writer made durable, for metrics. The
// composition root passes one to Observe; a Writer without one counts
// nothing (and pays only a nil check per row).
type Observer interface {
	// Table returns the observer of one source table's bronze table. The
	// Writer calls it once per table (when it first opens the table, or
	// when it first dead-letters one of its rows), on the stream goroutine,
	// so that what it counts per row needs no lookup by name.
	Table(id change.TableID) TableObserver
}

// OpenObserver is a TableObserver that is also told, when the Writer opens
// a table that already holds commits, the tidemark.* properties of its
// latest commit (its snapshot progress): a restarted process then reports
// the table's state before its next commit, which an idle table may not
// make for a long time. Called on the stream goroutine; must not block.
type OpenObserver interface {
	Opened(props map[string]string)
}

// TableObserver is told about one bronze table. Its methods are called on
// the stream goroutine, after the commit they describe is durable: for a
// flush, after the source-wide checkpoint is recorded as well. They must
// not block.
type TableObserver interface {
	// Committed reports one commit of the table.
	Committed(c Commit)
	// DeadLettered reports n rows of the table committed to the source's
	// dead-letter table.
	DeadLettered(n int64)
}

// Commit is what one bronze commit of a table held.
type Commit struct {
	Rows int64
	// Ops counts Rows by operation, indexed by OpIndex.
	Ops [NumOps]int64
	// Chunks is how many snapshot chunks (with rows) the commit holds.
	Chunks int64
	// FileBytes is the size of the data files the commit added
	// (lake.Snapshot.AddedBytes; 0 if the format did not say).
	FileBytes int64
	// Props are the commit's tidemark.* summary properties (the snapshot
	// progress, PropSnapshot of internal/source/postgres).
	Props map[string]string
	// TxCommitMicros are the source commit times (Unix microseconds: 8
	// bytes a transaction) of the transactions this commit completed
	// (their last rows in this table are durable), snapshot rows excluded:
	// one entry per transaction and table.
	TxCommitMicros []int64
	// At is when the commit was known durable.
	At time.Time
}

// Operations counted in Commit.Ops.
const (
	OpIndexRead = iota
	OpIndexInsert
	OpIndexUpdate
	OpIndexDelete
	OpIndexTruncate
	NumOps
)

// OpIndex is op's index in Commit.Ops (an operation no table row carries
// counts as a read).
func OpIndex(op change.Op) int {
	switch op {
	case change.OpInsert:
		return OpIndexInsert
	case change.OpUpdate:
		return OpIndexUpdate
	case change.OpDelete:
		return OpIndexDelete
	case change.OpTruncate:
		return OpIndexTruncate
	}
	return OpIndexRead
}

// Observe makes the Writer report to o. Call it before the first
// OpenTable.
func (w *Writer) Observe(o Observer) { w.obs = o }

// txAt is a transaction whose rows a table buffered: its commit position
// and source commit time (Unix microseconds).
type txAt struct {
	lsn    uint64
	micros int64
}

// noteTx counts c in tb's per-operation counts and records its
// transaction when it is the first row of it that tb holds. Stream
// goroutine only; only with an observer.
func (tb *tableBuf) noteTx(c *change.Change) {
	tb.ops[OpIndex(c.Op)]++
	if c.Op == change.OpRead || c.Pos.LSN == tb.txLSN {
		return
	}
	tb.txLSN = c.Pos.LSN
	tb.txs = append(tb.txs, txAt{c.Pos.LSN, c.CommitTime.UnixMicro()})
}

// detachTxs takes tb's transactions that the commit pc completes for it:
// those at or below the position it records (PropPosition, the commit
// position of the last transaction fully captured; a commit forced by
// schema evolution records the previous one). A transaction still being
// decoded waits for the commit that holds its end.
func (tb *tableBuf) detachTxs(pc *pendingCommit) {
	pc.ops, tb.ops = tb.ops, [NumOps]int64{}
	pc.chunks, tb.chunks = tb.chunks, 0
	commitLSN, err := strconv.ParseUint(pc.props[PropPosition], 10, 64)
	if err != nil || len(tb.txs) == 0 {
		return
	}
	n := 0
	for n < len(tb.txs) && tb.txs[n].lsn <= commitLSN {
		n++
	}
	if n == 0 {
		return
	}
	pc.txs = make([]int64, n)
	for i := range n {
		pc.txs[i] = tb.txs[i].micros
	}
	tb.txs = append(tb.txs[:0], tb.txs[n:]...)
}

// report tells the observer what the applied commits held.
func (w *Writer) report(pcs []*pendingCommit) {
	if w.obs == nil {
		return
	}
	now := w.now()
	for _, pc := range pcs {
		if pc.tb.obs != nil {
			pc.tb.obs.Committed(Commit{Rows: int64(pc.rows), Ops: pc.ops, Chunks: pc.chunks, FileBytes: pc.fileBytes, Props: pc.props, TxCommitMicros: pc.txs, At: now})
		}
		for id, n := range pc.dead {
			w.tableObserver(id).DeadLettered(n)
		}
	}
}

// tableObserver is id's observer (asked of the Observer once).
func (w *Writer) tableObserver(id change.TableID) TableObserver {
	if tb, ok := w.tables[id]; ok && tb.obs != nil {
		return tb.obs
	}
	if o, ok := w.deadObs[id]; ok {
		return o
	}
	o := w.obs.Table(id)
	if w.deadObs == nil {
		w.deadObs = map[change.TableID]TableObserver{}
	}
	w.deadObs[id] = o
	return o
}
