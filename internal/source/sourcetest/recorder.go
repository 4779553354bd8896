package sourcetest

import (
	"context"
	"fmt"
	"sync"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// noted is a change as the recorder keeps it: values as text by column.
type noted struct {
	Table  change.TableID
	Op     change.Op
	Pos    change.Position
	Key    string // the text of column id ("" for a truncate)
	Values map[string]string
}

// event is one call of the source on the sink: a change or a flush.
type event struct {
	change *noted
	flush  *pipeline.Checkpoint // the checkpoint a flush was asked to record
}

// recorder is the sink the suite hands a source: a bronze.Writer whose
// calls it notes. Like the Writer, it is a BackgroundSink and a ChunkSink,
// so the source runs its production path.
type recorder struct {
	w *bronze.Writer

	mu      sync.Mutex
	events  []event
	durable []pipeline.Checkpoint
	snap    map[change.TableID]string
	fail    error         // when set, every flush fails with it
	notify  chan struct{} // a token: something was noted
}

var (
	_ pipeline.BackgroundSink = (*recorder)(nil)
	_ pipeline.ChunkSink      = (*recorder)(nil)
)

func newRecorder(w *bronze.Writer) *recorder {
	return &recorder{w: w, snap: map[change.TableID]string{}, notify: make(chan struct{}, 1)}
}

func (r *recorder) changed() <-chan struct{} { return r.notify }

func (r *recorder) poke() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) failFlushes(err error) {
	r.mu.Lock()
	r.fail = err
	r.mu.Unlock()
}

func (r *recorder) log() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

func (r *recorder) changes(id change.TableID) []noted {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []noted
	for _, e := range r.events {
		if e.change != nil && e.change.Table == id {
			out = append(out, *e.change)
		}
	}
	return out
}

func (r *recorder) durables() []pipeline.Checkpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]pipeline.Checkpoint(nil), r.durable...)
}

func (r *recorder) snapshotStatus(id change.TableID) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := pipeline.ParseSnapshotState(r.snap[id])
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return st.Status
}

func (r *recorder) note(c *change.Change) {
	n := &noted{Table: c.Table, Op: c.Op, Pos: c.Pos, Values: map[string]string{}}
	if c.Schema != nil {
		for i, f := range c.Schema.Fields {
			if i < len(c.Values) {
				n.Values[f.Name] = text(c.Values[i])
			}
		}
	}
	if c.Op != change.OpTruncate {
		n.Key = n.Values["id"]
	}
	r.events = append(r.events, event{change: n})
}

func text(v any) string {
	if v == nil {
		return "<nil>"
	}
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(v)
}

func (r *recorder) props(id change.TableID, props map[string]string) {
	if v, ok := props[pipeline.PropSnapshot]; ok {
		r.snap[id] = v
	}
}

func (r *recorder) OpenTable(ctx context.Context, id change.TableID, s *change.Schema) (pipeline.TableState, error) {
	st, err := r.w.OpenTable(ctx, id, s)
	if err == nil {
		r.mu.Lock()
		r.props(id, st.Props)
		r.mu.Unlock()
	}
	return st, err
}

func (r *recorder) Write(ctx context.Context, c *change.Change) error {
	r.mu.Lock()
	r.note(c)
	r.mu.Unlock()
	r.poke()
	return r.w.Write(ctx, c)
}

func (r *recorder) WriteBatch(ctx context.Context, id change.TableID, cs []*change.Change, props map[string]string) error {
	r.mu.Lock()
	for _, c := range cs {
		r.note(c)
	}
	r.props(id, props)
	r.mu.Unlock()
	r.poke()
	return r.w.WriteBatch(ctx, id, cs, props)
}

func (r *recorder) WriteChunk(ctx context.Context, c *change.Chunk, props map[string]string) error {
	r.mu.Lock()
	for i := 0; i < c.Rows; i++ {
		n := &noted{Table: c.Table, Op: change.OpRead, Pos: c.Pos(i), Values: map[string]string{}}
		for j, f := range c.Schema.Fields {
			col := c.Columns[j]
			if col.IsNull(i) {
				n.Values[f.Name] = "<nil>"
			} else {
				n.Values[f.Name] = fmt.Sprint(col.GetOneForMarshal(i))
			}
		}
		n.Key = n.Values["id"]
		r.events = append(r.events, event{change: n})
	}
	r.props(c.Table, props)
	r.mu.Unlock()
	r.poke()
	return r.w.WriteChunk(ctx, c, props)
}

func (r *recorder) DeadLetter(ctx context.Context, d change.DeadLetter) error {
	return r.w.DeadLetter(ctx, d)
}

func (r *recorder) Message(ctx context.Context, m change.Message) error { return r.w.Message(ctx, m) }

func (r *recorder) Buffered() int64 { return r.w.Buffered() }

// flushing notes a flush of cp and returns the error it must fail with.
func (r *recorder) flushing(cp pipeline.Checkpoint) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{flush: &cp})
	return r.fail
}

func (r *recorder) durableAt(cp pipeline.Checkpoint) {
	r.mu.Lock()
	r.durable = append(r.durable, cp)
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) Flush(ctx context.Context, cp pipeline.Checkpoint) error {
	if err := r.flushing(cp); err != nil {
		return err
	}
	if err := r.w.Flush(ctx, cp); err != nil {
		return err
	}
	r.durableAt(cp)
	return nil
}

func (r *recorder) StartFlush(ctx context.Context, cp pipeline.Checkpoint) error {
	if err := r.flushing(cp); err != nil {
		return err
	}
	return r.w.StartFlush(ctx, cp)
}

func (r *recorder) FlushDone() <-chan struct{} { return r.w.FlushDone() }

func (r *recorder) FinishFlush() (pipeline.Checkpoint, error) {
	cp, err := r.w.FinishFlush()
	if err == nil && (cp.Pos != 0 || cp.Resume != "") {
		r.durableAt(cp)
	}
	return cp, err
}

func (r *recorder) LoadCheckpoint(ctx context.Context) (pipeline.Checkpoint, bool, error) {
	return r.w.LoadCheckpoint(ctx)
}
