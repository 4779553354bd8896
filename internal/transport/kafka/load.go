package kafka

// The consumer half: Loader reads the topics a Sink wrote back into
// changes (event.Decoder) and writes them to a pipeline.Sink (bronze), as
// a source would (`tidemark load`).
//
// Its guarantees:
//
//   - The resume token is the consumer offsets, committed in the lake with
//     the data: every commit of a table's bronze table carries, in its
//     snapshot summary (PropOffsets), the next offset of each partition of
//     the table's topic, in the same commit as the rows read before it. A
//     restart resumes each topic from what its table holds, so nothing is
//     written twice to a table and nothing is skipped, whenever the loader
//     was killed. The checkpoint the lake records after every table
//     (InfoOffsets) holds every topic's offsets, for topics whose table
//     does not exist yet (only dead letters or tombstones read so far) and
//     for status. Offsets committed to the consumer group are only
//     monitoring: they are committed after the lake's commit, and never
//     read.
//   - Gaps are fatal (kafka_gap): a partition whose earliest offset is
//     above the offset the lake records (retention deleted records not
//     loaded), whose end is below it (a recreated topic) or whose topic id
//     changed stops the loader before it reads on.
//   - Complete positions come from the capture's checkpoint record: once
//     the loader has read every partition up to the end offsets measured
//     after the capture recorded checkpoint C, every change at or below
//     C's position is in the sink; only then does the loader complete C
//     (pipeline.Engine.Completed), so each bronze commit's
//     tidemark.position and watermark mean what a direct capture's mean,
//     and C's table state (snapshot progress) reaches bronze with it.
//   - Malformed events go to the dead-letter table with their topic,
//     partition, offset and the decoder's named reason; they are never
//     skipped and never stop the loader.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/event"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// ErrGap is the loader's named error for a gap in a topic.
var ErrGap = fault.ErrKafkaGap

// PropOffsets is the bronze table summary key that holds the loaded
// offsets of the table's topic (JSON topicOffsets), committed with the
// rows read before them.
const PropOffsets = "tidemark.kafka-offsets"

// InfoOffsets is the checkpoint Info key that holds every topic's loaded
// offsets (JSON list of topicOffsets), and InfoGroup the consumer group.
const (
	InfoOffsets = "kafka-offsets"
	InfoGroup   = "kafka-group"
)

// discoverEvery bounds how often the loader lists the topics under its
// prefix for new ones.
const discoverEvery = 10 * time.Second

// maxRawBytes bounds the raw value a dead letter keeps of a malformed
// event.
const maxRawBytes = 1 << 20

// LoadOptions configure a Loader.
type LoadOptions struct {
	Brokers []string
	// Prefix is the capture's topic prefix: tables are read from the
	// topics <Prefix>.<schema>.<table>.
	Prefix string
	// Group is the consumer group the loaded offsets are committed to,
	// for monitoring (kafka-consumer-groups --describe).
	Group string
	// CommitInterval and CommitBytes are the engine's flush settings.
	CommitInterval time.Duration
	CommitBytes    int64
	// MaxElapsed bounds how long WaitUpstream retries the brokers while
	// they fail (retry.max_elapsed).
	MaxElapsed time.Duration
}

// Session is what one Run writes to and reports to.
type Session struct {
	Sink LoadSink
	// TableProps returns the tidemark.* properties of a table's latest
	// bronze commit (ok=false: no such table yet); an id with an empty
	// Schema names one of bronze's own tables (_messages, _dead_letter).
	TableProps func(ctx context.Context, id change.TableID) (props map[string]string, ok bool, err error)
	// OnDurable, if set, is called with each checkpoint the sink made
	// durable (progress, metrics).
	OnDurable func(pipeline.Checkpoint)
	// OnLag, if set, is told how many records of each table's topic (all
	// partitions) are not loaded yet, at each capture checkpoint the
	// loader starts reading up to.
	OnLag func(id change.TableID, records int64)
}

// LoadSink is what a Loader writes to (bronze.Writer).
type LoadSink interface {
	pipeline.Sink
	// NoteProps records props for the table's next commit (bronze's own
	// tables: an empty Schema).
	NoteProps(id change.TableID, props map[string]string) error
}

// topicOffsets is what a table records of its topic: the topic's id
// (a recreated topic has another) and the next offset of each partition.
type topicOffsets struct {
	Topic string          `json:"topic"`
	ID    string          `json:"id,omitempty"`
	Next  map[int32]int64 `json:"next"`
	// High is the highest source position loaded from each partition
	// (streamed changes, messages and dead letters; not snapshot rows): a
	// capture that crashed resends what it sent after its last checkpoint,
	// and those resends, at or below High, are dropped.
	High  map[int32]change.Position `json:"high,omitempty"`
	table change.TableID            // the lake table the offsets go with
	kind  topicKind
	dirty bool // moved since the last flush stamped them
	parts int  // partitions consumed (0 to parts-1)
}

type topicKind int

const (
	topicTable topicKind = iota
	topicMessages
	topicDeadLetters
)

// Upstream is the capture's latest checkpoint record, as a Sink recorded
// it: its pipeline's name (the key), its checkpoint and tables' state.
type Upstream struct {
	Name   string
	Offset int64
	record
}

// Loader loads a capture's topics into a LoadSink. One Run at a time.
type Loader struct {
	opts LoadOptions
	log  *slog.Logger
	cl   *kgo.Client // admin requests
	adm  *kadm.Client
}

// NewLoader connects to the brokers (lazily: the first request dials).
// Close releases the client.
func NewLoader(opts LoadOptions, log *slog.Logger) (*Loader, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(opts.Brokers...))
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return &Loader{opts: opts, log: log, cl: cl, adm: kadm.NewClient(cl)}, nil
}

// Close releases the loader's client.
func (l *Loader) Close() { l.cl.Close() }

func (l *Loader) checkpointTopic() string { return l.opts.Prefix + "." + CheckpointTopic }

// WaitUpstream returns the capture's latest checkpoint record, waiting
// (until ctx is done) for the capture to record its first one: its name
// is the pipeline the lake's tables are named after.
func (l *Loader) WaitUpstream(ctx context.Context) (Upstream, error) {
	logged := false
	var failingSince time.Time
	for {
		up, ok, err := l.readUpstream(ctx)
		switch {
		case ok:
			return up, nil
		case err != nil && (ctx.Err() != nil || fault.ClassOf(err) != fault.Transient):
			return up, err
		case err != nil:
			// The brokers are not there yet: retried, as a session is.
			if failingSince.IsZero() {
				failingSince = time.Now()
				l.log.Warn("cannot read the capture's checkpoint yet, retrying", "topic", l.checkpointTopic(), "error", err.Error())
			}
			if time.Since(failingSince) > l.opts.MaxElapsed {
				return up, &fault.GaveUpError{After: l.opts.MaxElapsed, Err: err}
			}
		default:
			failingSince = time.Time{}
		}
		if err == nil && !logged {
			l.log.Info("waiting for the capture's first checkpoint", "topic", l.checkpointTopic())
			logged = true
		}
		select {
		case <-ctx.Done():
			return up, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// readUpstream reads the last record of the checkpoint topic (the topic
// is compacted: its last record is the latest checkpoint).
func (l *Loader) readUpstream(ctx context.Context) (Upstream, bool, error) {
	return l.readUpstreamAfter(ctx, -1)
}

// readUpstreamAfter is readUpstream, ok=false without reading when the
// last record is at or below offset after (nothing new).
func (l *Loader) readUpstreamAfter(ctx context.Context, after int64) (Upstream, bool, error) {
	topic := l.checkpointTopic()
	ends, err := l.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return Upstream{}, false, fault.MarkTransient(fmt.Errorf("kafka: read the end of %s: %w", topic, err))
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || errors.Is(end.Err, kerr.UnknownTopicOrPartition) {
		return Upstream{}, false, nil
	}
	if end.Err != nil {
		return Upstream{}, false, fault.MarkTransient(fmt.Errorf("kafka: read the end of %s: %w", topic, end.Err))
	}
	if end.Offset == 0 || end.Offset-1 <= after {
		return Upstream{}, false, nil
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(l.opts.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(end.Offset - 1)}}))
	if err != nil {
		return Upstream{}, false, fmt.Errorf("kafka: %w", err)
	}
	defer cons.Close()
	for {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return Upstream{}, false, fault.MarkTransient(fmt.Errorf("kafka: read the checkpoint topic %s: %w", topic, err))
		}
		var up Upstream
		var found bool
		var derr error
		fs.EachRecord(func(r *kgo.Record) {
			if r.Value == nil || r.Offset < end.Offset-1 {
				return
			}
			var rec record
			if derr = json.Unmarshal(r.Value, &rec); derr == nil {
				up, found = Upstream{Name: string(r.Key), Offset: r.Offset, record: rec}, true
			}
		})
		if derr != nil {
			return Upstream{}, false, fault.With(fault.ErrCorruptState, fmt.Sprintf("the capture's checkpoint record in %s is unreadable", topic), derr)
		}
		if found {
			return up, true, nil
		}
	}
}

// session is one Run's state. Stream goroutine only, but for latest.
type session struct {
	l      *Loader
	ses    Session
	sink   LoadSink
	engine *pipeline.Engine
	dec    *event.Decoder
	cons   *kgo.Client

	topics map[string]*topicOffsets
	// schemas is the schema each table was last opened with.
	schemas map[change.TableID]*change.Schema
	// applied are the capture's table state props last noted per table.
	applied map[change.TableID]map[string]string
	name    string

	lastDiscover time.Time
	// pending is the capture checkpoint waiting for the loader to read up
	// to ends; marked is the offset of the last one completed.
	pending *pendingMark
	marked  int64

	mu     sync.Mutex
	latest *Upstream // the capture's latest checkpoint record (watch)
}

type pendingMark struct {
	up   Upstream
	ends map[string]map[int32]int64
}

// Run loads until ctx is done (then it flushes and returns nil) or an
// error: a gap (ErrGap) or a broker or lake error (transient ones marked).
// up is the capture's checkpoint record WaitUpstream returned.
func (l *Loader) Run(ctx context.Context, up Upstream, ses Session) error {
	sink := ses.Sink
	s := &session{l: l, ses: ses, sink: sink, dec: event.NewDecoder(), topics: map[string]*topicOffsets{},
		schemas: map[change.TableID]*change.Schema{}, applied: map[change.TableID]map[string]string{},
		name: up.Name, marked: -1}
	start, ok, err := sink.LoadCheckpoint(ctx)
	if err != nil {
		return err
	}
	if ok {
		if err := s.readInfo(start.Info[InfoOffsets]); err != nil {
			return err
		}
	}
	s.engine = pipeline.NewEngine(sink, start, pipeline.EngineOptions{
		CommitInterval: l.opts.CommitInterval, CommitBytes: l.opts.CommitBytes,
		Ack: s.ack, OnDurable: ses.OnDurable, Stamp: s.stamp,
	})
	assign, err := s.discover(ctx)
	if err != nil {
		return err
	}
	if len(assign) == 0 {
		// The capture creates its topics before its first checkpoint.
		return fault.MarkTransient(fmt.Errorf("kafka: no topic under %s. yet", l.opts.Prefix))
	}
	s.cons, err = kgo.NewClient(kgo.SeedBrokers(l.opts.Brokers...),
		kgo.ConsumePartitions(assign),
		// A partition whose offset is out of range is a gap: never reset.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.FetchMaxBytes(int32(min(max(l.opts.CommitBytes, 1<<20), 256<<20))),
	)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer s.cons.Close()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go s.watch(wctx)
	for {
		if ctx.Err() != nil {
			return s.stop(ctx)
		}
		pctx, cancel := context.WithDeadline(ctx, s.engine.Wake())
		fs := s.cons.PollRecords(pctx, 5000)
		cancel()
		if ctx.Err() != nil {
			return s.stop(ctx)
		}
		for _, fe := range fs.Errors() {
			if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
				continue
			}
			if errors.Is(fe.Err, kerr.OffsetOutOfRange) {
				return s.gapNow(ctx, fe.Topic, fe.Partition)
			}
			return fault.MarkTransient(fmt.Errorf("kafka: fetch topic %s partition %d: %w", fe.Topic, fe.Partition, fe.Err))
		}
		var herr error
		fs.EachRecord(func(r *kgo.Record) {
			if herr == nil {
				herr = s.handle(ctx, r)
			}
		})
		if herr != nil {
			return herr
		}
		if err := s.mark(ctx); err != nil {
			return err
		}
		if err := s.engine.Poll(ctx); err != nil {
			return err
		}
	}
}

// stop flushes what was read and waits until it is durable (a clean stop),
// unless the session's context ended because the loader lost its hold on
// the lake (Hold): then it writes nothing more, and the next holder
// loads what was not committed.
func (s *session) stop(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), ErrHoldLost) {
		return fault.MarkTransient(ErrHoldLost)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(context.Background()), time.Minute)
	defer cancel()
	return s.engine.Sync(ctx)
}

// readInfo takes the offsets the lake's checkpoint records.
func (s *session) readInfo(info string) error {
	if info == "" {
		return nil
	}
	var list []topicOffsets
	if err := json.Unmarshal([]byte(info), &list); err != nil {
		return fault.With(fault.ErrCorruptState, "the lake's checkpoint property tidemark."+InfoOffsets+" is unreadable; refusing to guess the offsets to load from", err)
	}
	for _, t := range list {
		s.topics[t.Topic] = &topicOffsets{Topic: t.Topic, ID: t.ID, Next: t.Next, High: t.High}
	}
	return nil
}

// classify names the lake table a topic's records go to; ok=false for a
// topic that is not the capture's.
func (s *session) classify(topic string) (change.TableID, topicKind, bool) {
	rest, ok := strings.CutPrefix(topic, s.l.opts.Prefix+".")
	if !ok || rest == "" {
		return change.TableID{}, 0, false
	}
	switch rest {
	case CheckpointTopic:
		return change.TableID{}, 0, false
	case MessagesTopic:
		return change.TableID{Name: MessagesTopic}, topicMessages, true
	case DeadLetterTopic:
		return change.TableID{Name: DeadLetterTopic}, topicDeadLetters, true
	}
	schema, name, ok := strings.Cut(rest, ".")
	if !ok || schema == "" || name == "" {
		return change.TableID{}, 0, false
	}
	return change.TableID{Schema: schema, Name: name}, topicTable, true
}

// discover lists the topics under the prefix and returns the partitions
// not consumed yet, at the offsets to read them from (after the gap
// checks).
func (s *session) discover(ctx context.Context) (map[string]map[int32]kgo.Offset, error) {
	s.lastDiscover = time.Now()
	details, err := s.l.adm.ListTopics(ctx)
	if err != nil {
		return nil, fault.MarkTransient(fmt.Errorf("kafka: list the topics under %s: %w", s.l.opts.Prefix, err))
	}
	assign := map[string]map[int32]kgo.Offset{}
	var names []string
	for _, name := range details.Names() {
		d := details[name]
		if d.Err != nil || d.IsInternal {
			continue
		}
		id, kind, ok := s.classify(name)
		if !ok {
			continue
		}
		t := s.topics[name]
		if t == nil {
			t = &topicOffsets{Topic: name, Next: map[int32]int64{}}
			s.topics[name] = t
		}
		if t.Next == nil {
			t.Next = map[int32]int64{}
		}
		if t.High == nil {
			t.High = map[int32]change.Position{}
		}
		t.table, t.kind = id, kind
		if t.consumed() == len(d.Partitions) {
			continue
		}
		// The table's own record of its topic is at least as new as the
		// checkpoint's (committed with its rows, before the checkpoint).
		props, ok, err := s.ses.TableProps(ctx, s.propsTable(t))
		if err != nil {
			return nil, err
		}
		if ok && props[PropOffsets] != "" {
			var rec topicOffsets
			if err := json.Unmarshal([]byte(props[PropOffsets]), &rec); err != nil {
				return nil, fault.With(fault.ErrCorruptState, fmt.Sprintf("bronze table of %s: property %s is unreadable; refusing to guess the offsets to load from", id, PropOffsets), err)
			}
			if rec.Topic == name {
				if rec.ID != "" {
					t.ID = rec.ID
				}
				for p, n := range rec.Next {
					if n > t.Next[p] {
						t.Next[p] = n
					}
				}
				for p, h := range rec.High {
					if t.High[p].Less(h) {
						t.High[p] = h
					}
				}
			}
		}
		current := d.ID.String()
		if t.ID != "" && t.ID != current && current != (kadm.TopicID{}).String() {
			return nil, fault.With(ErrGap, fmt.Sprintf("topic %s was deleted and created again since tidemark load last read it (its id was %s, it is %s): the lake holds changes the new topic does not, and the offsets recorded for it mean nothing in the new one. To recover, start a fresh capture (another --name and --topic-prefix) and load it into a fresh lake",
				name, t.ID, current), nil)
		}
		t.ID = current
		names = append(names, name)
	}
	if len(names) == 0 {
		return assign, nil
	}
	starts, err := s.l.adm.ListStartOffsets(ctx, names...)
	if err != nil {
		return nil, fault.MarkTransient(fmt.Errorf("kafka: list the start offsets of %s: %w", strings.Join(names, ", "), err))
	}
	ends, err := s.l.adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return nil, fault.MarkTransient(fmt.Errorf("kafka: list the end offsets of %s: %w", strings.Join(names, ", "), err))
	}
	for _, name := range names {
		t := s.topics[name]
		for p := range details[name].Partitions {
			if _, on := t.consuming(p); on {
				continue
			}
			st, ok1 := starts.Lookup(name, p)
			en, ok2 := ends.Lookup(name, p)
			if !ok1 || !ok2 || st.Err != nil || en.Err != nil {
				return nil, fault.MarkTransient(fmt.Errorf("kafka: list the offsets of %s partition %d: %w", name, p, errors.Join(st.Err, en.Err)))
			}
			next, recorded := t.Next[p]
			switch {
			case recorded && next < st.Offset:
				return nil, s.gap(name, p, next, st.Offset, en.Offset)
			case recorded && next > en.Offset:
				return nil, fault.With(ErrGap, fmt.Sprintf("topic %s partition %d ends at offset %d, but the lake has loaded it up to offset %d: the topic was recreated or truncated, and its records are not the ones the lake holds. To recover, start a fresh capture (another --name and --topic-prefix) and load it into a fresh lake",
					name, p, en.Offset, next), nil)
			case !recorded && st.Offset > 0:
				return nil, fault.With(ErrGap, fmt.Sprintf("topic %s partition %d: the lake has loaded nothing of it, but the broker keeps only offsets %d to %d: the first %d records were deleted (retention.ms or retention.bytes, or DeleteRecords) before tidemark load read them, and the lake would miss their changes (the table's snapshot rows among them). Load from a capture whose topics are complete: start a fresh capture (another --name and --topic-prefix: its topics begin with a full snapshot) and load it",
					name, p, st.Offset, en.Offset, st.Offset), nil)
			}
			if !recorded {
				next = st.Offset
			}
			t.Next[p] = next
			if assign[name] == nil {
				assign[name] = map[int32]kgo.Offset{}
			}
			assign[name][p] = kgo.NewOffset().At(next)
			s.l.log.Info("loading topic", "topic", name, "partition", p, "from_offset", next, "end_offset", en.Offset)
		}
		t.assigned(len(details[name].Partitions))
	}
	return assign, nil
}

// gap is the named error for records deleted before they were loaded.
func (s *session) gap(topic string, p int32, next, start, end int64) error {
	return fault.With(ErrGap, fmt.Sprintf("topic %s partition %d: the lake has loaded it up to offset %d, but the broker keeps only offsets %d to %d: the %d records in [%d, %d) were deleted (retention.ms or retention.bytes, or DeleteRecords) before tidemark load read them, and their changes are missing from the lake. Raise the topics' retention so it outlasts loader outages; to recover, start a fresh capture (another --name and --topic-prefix: its topics begin with a full snapshot) and load it into a fresh lake",
		topic, p, next, start, end, start-next, next, start), nil)
}

// gapNow reports an out-of-range fetch with the partition's offsets.
func (s *session) gapNow(ctx context.Context, topic string, p int32) error {
	next := s.topics[topic].Next[p]
	starts, err1 := s.l.adm.ListStartOffsets(ctx, topic)
	ends, err2 := s.l.adm.ListEndOffsets(ctx, topic)
	st, _ := starts.Lookup(topic, p)
	en, _ := ends.Lookup(topic, p)
	if err1 != nil || err2 != nil {
		return fault.With(ErrGap, fmt.Sprintf("topic %s partition %d: offset %d is out of range (deleted by retention, or the topic was recreated)", topic, p, next), nil)
	}
	return s.gap(topic, p, next, st.Offset, en.Offset)
}

// propsTable is the lake table whose props record t's offsets.
func (s *session) propsTable(t *topicOffsets) change.TableID {
	switch t.kind {
	case topicMessages:
		return change.TableID{Name: MessagesTopic}
	case topicDeadLetters:
		return change.TableID{Name: DeadLetterTopic}
	}
	return t.table
}

// assigned notes that partitions 0 to n-1 are consumed.
func (t *topicOffsets) assigned(n int) { t.parts = n }

// consumed is how many partitions are consumed.
func (t *topicOffsets) consumed() int { return t.parts }

// consuming returns the next offset of partition p, if it is consumed.
func (t *topicOffsets) consuming(p int32) (int64, bool) {
	if int(p) < t.parts {
		return t.Next[p], true
	}
	return 0, false
}

// handle decodes one record and writes it to the sink.
func (s *session) handle(ctx context.Context, r *kgo.Record) error {
	t := s.topics[r.Topic]
	if t == nil {
		return nil
	}
	t.Next[r.Partition] = r.Offset + 1
	t.dirty = true
	d, err := s.dec.Decode(r.Key, r.Value)
	if err != nil {
		raw := r.Value
		if len(raw) > maxRawBytes {
			raw = raw[:maxRawBytes]
		}
		reason, cause := "bad_event", err
		var de *event.DecodeError
		if errors.As(err, &de) {
			reason, cause = de.Reason, de.Err
		}
		s.l.log.Warn("undecodable event dead-lettered", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason)
		return s.sink.DeadLetter(ctx, change.DeadLetter{Table: t.table, CommitTime: r.Timestamp,
			Raw:   strings.ToValidUTF8(string(raw), string(utf8.RuneError)),
			Error: fmt.Sprintf("kafka event %s: topic %s partition %d offset %d: %v", reason, r.Topic, r.Partition, r.Offset, cause)})
	}
	var pos change.Position
	switch d.Kind {
	case event.KindChange:
		pos = d.Change.Pos
	case event.KindMessage:
		pos = d.Message.Pos
	case event.KindDeadLetter:
		pos = d.DeadLetter.Pos
	}
	if d.Kind != event.KindTombstone && (d.Kind != event.KindChange || d.Change.Op != change.OpRead) {
		// In a partition, the capture's events are in position order; one
		// at or below the highest loaded is a resend after its crash.
		if !t.High[r.Partition].Less(pos) {
			s.l.log.Debug("capture's resend dropped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "position", pos.String())
			return nil
		}
		t.High[r.Partition] = pos
	}
	switch d.Kind {
	case event.KindTombstone:
		return nil
	case event.KindMessage:
		return s.sink.Message(ctx, d.Message)
	case event.KindDeadLetter:
		return s.sink.DeadLetter(ctx, d.DeadLetter)
	}
	c := d.Change
	if s.schemas[c.Table] != c.Schema {
		if _, err := s.sink.OpenTable(ctx, c.Table, c.Schema); err != nil {
			return fmt.Errorf("load topic %s partition %d offset %d into table %s: %w", r.Topic, r.Partition, r.Offset, c.Table, err)
		}
		s.schemas[c.Table] = c.Schema
	}
	if err := s.sink.Write(ctx, c); err != nil {
		return fmt.Errorf("load topic %s partition %d offset %d into table %s: %w", r.Topic, r.Partition, r.Offset, c.Table, err)
	}
	if s.engine.Full() {
		return s.engine.Flush(ctx)
	}
	return nil
}

// watch follows the capture's checkpoint topic and keeps its latest
// record in s.latest, until ctx is done.
func (s *session) watch(ctx context.Context) {
	after := int64(-1)
	for ctx.Err() == nil {
		up, ok, err := s.l.readUpstreamAfter(ctx, after)
		if err == nil && ok {
			after = up.Offset
			s.mu.Lock()
			s.latest = &up
			s.mu.Unlock()
		} else if err != nil && ctx.Err() == nil {
			s.l.log.Debug("read the capture's checkpoint", "error", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(max(s.l.opts.CommitInterval/2, 100*time.Millisecond)):
		}
	}
}

// mark completes the capture's checkpoint once every partition has been
// read up to the ends measured after it was recorded; then takes the
// next one.
func (s *session) mark(ctx context.Context) error {
	if s.pending == nil {
		s.mu.Lock()
		up := s.latest
		s.mu.Unlock()
		if up == nil || up.Offset <= s.marked {
			return nil
		}
		if time.Since(s.lastDiscover) >= discoverEvery {
			assign, err := s.discover(ctx)
			if err != nil {
				return err
			}
			if len(assign) > 0 {
				s.cons.AddConsumePartitions(assign)
			}
		}
		var names []string
		for name := range s.topics {
			if s.topics[name].parts > 0 {
				names = append(names, name)
			}
		}
		pm := &pendingMark{up: *up, ends: map[string]map[int32]int64{}}
		ends := kadm.ListedOffsets{}
		if len(names) > 0 { // none: ListEndOffsets would list every topic's
			var err error
			if ends, err = s.l.adm.ListEndOffsets(ctx, names...); err != nil {
				return fault.MarkTransient(fmt.Errorf("kafka: list the end offsets: %w", err))
			}
		}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil {
				if pm.ends[o.Topic] == nil {
					pm.ends[o.Topic] = map[int32]int64{}
				}
				pm.ends[o.Topic][o.Partition] = o.Offset
			}
		})
		s.pending = pm
		if s.ses.OnLag != nil {
			for topic, ps := range pm.ends {
				t := s.topics[topic]
				if t == nil || t.kind != topicTable {
					continue
				}
				var lag int64
				for p, end := range ps {
					if n, on := t.consuming(p); on && end > n {
						lag += end - n
					}
				}
				s.ses.OnLag(t.table, lag)
			}
		}
	}
	for topic, ps := range s.pending.ends {
		t := s.topics[topic]
		for p, end := range ps {
			if n, on := t.consuming(p); on && n < end {
				return nil
			}
		}
	}
	// Read up to the checkpoint: its tables' state joins the changes.
	up := s.pending.up
	s.pending, s.marked = nil, up.Offset
	for _, ts := range up.Tables {
		id := change.TableID{Schema: ts.Schema, Name: ts.Name}
		if _, open := s.schemas[id]; !open {
			continue // no bronze table yet: a later checkpoint carries it again
		}
		props := map[string]string{}
		for k, v := range ts.Props {
			if k != pipeline.PropColumnIDs && !strings.HasPrefix(k, "tidemark.kafka-") {
				props[k] = v
			}
		}
		if maps.Equal(props, s.applied[id]) {
			continue
		}
		if err := s.sink.NoteProps(id, props); err != nil {
			return err
		}
		s.applied[id] = props
	}
	cp := up.Checkpoint
	cp.Info = maps.Clone(cp.Info)
	s.engine.Completed(cp)
	return nil
}

// stamp records, as a flush starts, the offsets read so far: each
// table's with its commit, all of them in the checkpoint's Info.
func (s *session) stamp(cp *pipeline.Checkpoint) {
	names := make([]string, 0, len(s.topics))
	for name := range s.topics {
		names = append(names, name)
	}
	sort.Strings(names)
	list := make([]topicOffsets, 0, len(names))
	for _, name := range names {
		t := s.topics[name]
		list = append(list, topicOffsets{Topic: t.Topic, ID: t.ID, Next: maps.Clone(t.Next), High: maps.Clone(t.High)})
		if !t.dirty {
			continue
		}
		id := s.propsTable(t)
		if _, open := s.schemas[id]; open || t.kind != topicTable {
			b, _ := json.Marshal(topicOffsets{Topic: t.Topic, ID: t.ID, Next: t.Next, High: t.High})
			// NoteProps fails only for a table not open, checked above.
			_ = s.sink.NoteProps(id, map[string]string{PropOffsets: string(b)})
			t.dirty = false
		}
	}
	b, _ := json.Marshal(list)
	info := maps.Clone(cp.Info)
	if info == nil {
		info = map[string]string{}
	}
	info[InfoOffsets] = string(b)
	info[InfoGroup] = s.l.opts.Group
	cp.Info = info
}

// ack commits the offsets the lake now holds to the consumer group, for
// monitoring only: a failure is logged, never fatal (the lake's offsets
// are the ones a restart reads).
func (s *session) ack(ctx context.Context, cp pipeline.Checkpoint) error {
	if s.l.opts.Group == "" || cp.Info[InfoOffsets] == "" {
		return nil
	}
	var list []topicOffsets
	if err := json.Unmarshal([]byte(cp.Info[InfoOffsets]), &list); err != nil {
		return nil
	}
	os := kadm.Offsets{}
	for _, t := range list {
		for p, n := range t.Next {
			if os[t.Topic] == nil {
				os[t.Topic] = map[int32]kadm.Offset{}
			}
			os[t.Topic][p] = kadm.Offset{Topic: t.Topic, Partition: p, At: n, LeaderEpoch: -1}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := s.l.adm.CommitOffsets(cctx, s.l.opts.Group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil && ctx.Err() == nil {
		s.l.log.Warn("could not commit the loaded offsets to the consumer group (monitoring only: the lake holds the offsets tidemark resumes from)",
			"group", s.l.opts.Group, "error", err.Error())
	}
	return nil
}

// Position formats a checkpoint's loaded offsets for people: topic
// partition:offset, …
func Position(cp pipeline.Checkpoint) string {
	var list []topicOffsets
	if json.Unmarshal([]byte(cp.Info[InfoOffsets]), &list) != nil {
		return ""
	}
	var parts []string
	for _, t := range list {
		ps := make([]int32, 0, len(t.Next))
		for p := range t.Next {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		for _, p := range ps {
			parts = append(parts, t.Topic+"/"+strconv.Itoa(int(p))+":"+strconv.FormatInt(t.Next[p], 10))
		}
	}
	return strings.Join(parts, ",")
}
