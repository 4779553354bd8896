// Package kafka is tidemark's Kafka transport. Sink publishes a source's
// changes to Kafka as Debezium-compatible events (`tidemark run --sink
// kafka://…`), so that capture and loading scale apart and existing
// Debezium consumers read them unchanged; Loader reads them back into the
// lake (`tidemark load`, load.go, with its own guarantees there; Hold in
// hold.go keeps one loader writing a lake at a time).
//
// The Sink's guarantees (the same rules as the lake's):
//
//   - Resources before data: every topic is created (or verified) when
//     its table is opened, before the first send: partitions, replication
//     factor, retention.ms, retention.bytes -1, cleanup.policy delete,
//     max.message.bytes. A topic whose retention is 0 or below
//     kafka.min_retention is refused (kafka_retention): with it,
//     acknowledged would mean deleted.
//   - Acknowledged means in the broker: Flush returns only once the
//     brokers have acknowledged (acks=all, idempotent producer) every
//     record written before it, and then the checkpoint record; only then
//     does the engine acknowledge the source position. A failed or
//     timed-out send fails Flush (kafka_send_failed): nothing after the
//     last checkpoint is acknowledged, and the next session resends it.
//   - The checkpoint lives in Kafka: a compacted one-partition topic
//     <prefix>._tidemark_checkpoint holds, under the pipeline's name, the
//     source's resume token, the position and watermark, each table's
//     cursor (the highest position sent) and its state properties
//     (snapshot progress). A restart reads it back, so a killed run
//     resumes where the last flush left it and a snapshot at its next
//     chunk.
//   - At least once: after a crash the changes sent since the last
//     checkpoint are sent again. Deduplicate on (source.lsn, source.sequence):
//     every record carries its commit position and its order in it.
//
// Records are keyed by the primary key (Debezium's key JSON), so one key's
// changes stay in one partition, in commit order.
package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/event"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// The named errors of the sink (defined in package fault, documented in
// docs/operations.md).
var (
	ErrSendFailed      = fault.ErrKafkaSendFailed
	ErrMessageTooLarge = fault.ErrKafkaMessageTooLarge
	ErrRetention       = fault.ErrKafkaRetention
)

// Options configure a Sink.
type Options struct {
	Brokers []string
	// Prefix prefixes every topic: <Prefix>.<schema>.<table>.
	Prefix string
	// Name is the pipeline's name: the key of its checkpoint record.
	Name string
	// Topic settings of the topics the Sink creates, and the least
	// retention an existing one may have.
	Partitions        int32
	ReplicationFactor int16
	Retention         time.Duration
	MinRetention      time.Duration
	MaxMessageBytes   int
	// SendTimeout bounds the wait for a record's acknowledgement.
	SendTimeout time.Duration
	// MaxBufferedBytes bounds the bytes of records produced and not yet
	// acknowledged: Write blocks past it (back-pressure).
	MaxBufferedBytes int64
	// Event are the encoder's options (the shape is always Debezium's).
	Event event.Options
}

// Topic names beside the tables' (<prefix>.<suffix>).
const (
	MessagesTopic   = "_messages"
	DeadLetterTopic = "_dead_letter"
	CheckpointTopic = "_tidemark_checkpoint"
)

// Sink publishes changes to Kafka. Its methods are called from the
// source's stream goroutine only (pipeline.Sink).
type Sink struct {
	opts Options
	log  *slog.Logger
	cl   *kgo.Client
	adm  *kadm.Client
	enc  *event.Encoder

	topics map[string]bool // created or verified this session
	// tables indexes state.Tables by table.
	tables map[change.TableID]int

	// sendErr is the first failed send's error; buffered the bytes
	// produced and not yet acknowledged.
	errMu    sync.Mutex
	sendErr  error
	buffered atomic.Int64
	// freed is signalled when an acknowledgement (or failure) frees
	// buffered bytes (room).
	freed chan struct{}

	// state is what the checkpoint record holds, as last recorded, with
	// this session's updates (cursors, props) applied: recorded at the
	// next Flush, after the records they describe.
	loaded bool
	state  record
}

var _ pipeline.Sink = (*Sink)(nil)

// record is the checkpoint record's value.
type record struct {
	Checkpoint pipeline.Checkpoint `json:"checkpoint"`
	Tables     []tableState        `json:"tables"`
}

type tableState struct {
	Schema string            `json:"schema"`
	Name   string            `json:"name"`
	Cursor change.Position   `json:"cursor"`
	Props  map[string]string `json:"props,omitempty"`
}

// New connects to the brokers, creates (or verifies) the pipeline's own
// topics and reads its checkpoint. Close releases the client.
func New(ctx context.Context, opts Options, log *slog.Logger) (*Sink, error) {
	// Kafka Connect's JsonConverter with schemas.enable=true, Debezium's
	// default: a consumer (a loader, a Connect sink) gets each column's
	// type with its value.
	opts.Event.Shape, opts.Event.Schema = event.Debezium, true
	enc, err := event.NewEncoder(opts.Event)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(opts.Brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(int32(opts.MaxMessageBytes)),
		// The Sink bounds what is buffered itself (room: a wait bounded by
		// SendTimeout); the client's bounds are above it, so that Produce
		// never blocks (the default 10,000 records would block Write
		// without a bound while the brokers are away).
		kgo.MaxBufferedBytes(int(max(opts.MaxBufferedBytes, int64(opts.MaxMessageBytes))+int64(opts.MaxMessageBytes))),
		kgo.MaxBufferedRecords(1<<24),
		kgo.RecordDeliveryTimeout(opts.SendTimeout),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchCompression(kgo.ZstdCompression(), kgo.NoCompression()),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	s := &Sink{opts: opts, log: log, cl: cl, adm: kadm.NewClient(cl), enc: enc, topics: map[string]bool{},
		tables: map[change.TableID]int{}, freed: make(chan struct{}, 1)}
	for _, t := range []string{MessagesTopic, DeadLetterTopic} {
		if err := s.ensureTopic(ctx, opts.Prefix+"."+t, false); err != nil {
			cl.Close()
			return nil, err
		}
	}
	if err := s.ensureTopic(ctx, s.checkpointTopic(), true); err != nil {
		cl.Close()
		return nil, err
	}
	if err := s.readCheckpoint(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the client; records not flushed are abandoned (they were
// never acknowledged).
func (s *Sink) Close() { s.cl.Close() }

func (s *Sink) checkpointTopic() string { return s.opts.Prefix + "." + CheckpointTopic }

// TableTopic is the topic of a table's changes.
func TableTopic(prefix string, id change.TableID) string {
	return prefix + "." + id.Schema + "." + id.Name
}

// ensureTopic creates topic with the Sink's settings, or verifies an
// existing one: its retention must keep what a loader has not read yet.
// compact: the checkpoint topic (one partition, compacted).
func (s *Sink) ensureTopic(ctx context.Context, topic string, compact bool) error {
	if s.topics[topic] {
		return nil
	}
	if err := checkTopicName(topic); err != nil {
		return err
	}
	partitions, configs := s.opts.Partitions, map[string]*string{
		"cleanup.policy":    ptr("delete"),
		"retention.ms":      ptr(strconv.FormatInt(s.opts.Retention.Milliseconds(), 10)),
		"retention.bytes":   ptr("-1"),
		"max.message.bytes": ptr(strconv.Itoa(s.opts.MaxMessageBytes)),
	}
	if compact {
		partitions = 1
		configs = map[string]*string{"cleanup.policy": ptr("compact")}
	}
	resp, err := s.adm.CreateTopic(ctx, partitions, s.opts.ReplicationFactor, configs, topic)
	switch {
	case err == nil && resp.Err == nil:
		s.log.Info("created topic", "topic", topic, "partitions", partitions, "retention", s.opts.Retention.String(), "compact", compact)
	case errors.Is(err, kerr.TopicAlreadyExists) || errors.Is(resp.Err, kerr.TopicAlreadyExists):
		if err := s.verifyTopic(ctx, topic, compact); err != nil {
			return err
		}
	case err != nil:
		return fault.With(ErrSendFailed, fmt.Sprintf("create topic %s", topic), err)
	default:
		return fault.With(ErrSendFailed, fmt.Sprintf("create topic %s", topic), resp.Err)
	}
	s.topics[topic] = true
	return nil
}

// verifyTopic checks an existing topic's retention (and, for the
// checkpoint topic, that it is compacted).
func (s *Sink) verifyTopic(ctx context.Context, topic string, compact bool) error {
	rcs, err := s.adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return fault.With(ErrSendFailed, fmt.Sprintf("describe topic %s", topic), err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		return fault.With(ErrSendFailed, fmt.Sprintf("describe topic %s", topic), errors.Join(err, rc.Err))
	}
	get := func(k string) (string, bool) {
		for _, c := range rc.Configs {
			if c.Key == k && c.Value != nil {
				return *c.Value, true
			}
		}
		return "", false
	}
	if compact {
		if p, _ := get("cleanup.policy"); p != "compact" {
			return fault.With(ErrRetention, fmt.Sprintf("topic %s holds tidemark's checkpoint and must have cleanup.policy=compact, not %q (delete it to let tidemark create it)", topic, p), nil)
		}
		return nil
	}
	if p, _ := get("cleanup.policy"); p != "" && p != "delete" && p != "compact,delete" && p != "delete,compact" {
		return fault.With(ErrRetention, fmt.Sprintf("topic %s has cleanup.policy=%s; tidemark's change topics need delete (a compacted change log loses the history of a key)", topic, p), nil)
	}
	if v, ok := get("retention.ms"); ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err == nil && ms >= 0 && time.Duration(ms)*time.Millisecond < s.opts.MinRetention {
			return fault.With(ErrRetention, fmt.Sprintf("topic %s has retention.ms=%d, below kafka.min_retention (%s)", topic, ms, s.opts.MinRetention), nil)
		}
	}
	return nil
}

func checkTopicName(t string) error {
	if len(t) > 249 {
		return fault.With(fault.ErrBadConfig, fmt.Sprintf("topic name %s is longer than Kafka's 249 characters: shorten topic_prefix", t), nil)
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fault.With(fault.ErrBadConfig, fmt.Sprintf("topic name %q has a character Kafka refuses (%q): the table's schema or name cannot be a topic name", t, r), nil)
		}
	}
	return nil
}

func ptr(s string) *string { return &s }

// readCheckpoint reads the pipeline's last checkpoint record.
func (s *Sink) readCheckpoint(ctx context.Context) error {
	topic := s.checkpointTopic()
	// A topic just created may not have a leader yet: its end offset is
	// asked again for up to SendTimeout.
	var end kadm.ListedOffset
	for deadline := time.Now().Add(s.opts.SendTimeout); ; {
		ends, err := s.adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return fault.With(ErrSendFailed, "read the checkpoint topic "+topic, err)
		}
		var ok bool
		if end, ok = ends.Lookup(topic, 0); ok && end.Err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fault.With(ErrSendFailed, "read the checkpoint topic "+topic, errors.Join(errors.New("no partition 0"), end.Err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if end.Offset == 0 {
		return nil
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(s.opts.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cons.Close()
	for {
		// Each poll is bounded: brokers that went away mid-read are a
		// kafka_send_failed (the session is retried), not a silent wait.
		pctx, cancel := context.WithTimeout(ctx, s.opts.SendTimeout)
		fs := cons.PollFetches(pctx)
		cancel()
		if err := fs.Err0(); err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("no record within kafka.send_timeout (%s): %w", s.opts.SendTimeout, err)
			}
			return fault.With(ErrSendFailed, "read the checkpoint topic "+topic, err)
		}
		var last int64
		fs.EachRecord(func(r *kgo.Record) {
			last = r.Offset
			if string(r.Key) != s.opts.Name || r.Value == nil {
				return
			}
			var rec record
			if err = json.Unmarshal(r.Value, &rec); err == nil {
				s.state, s.loaded = rec, true
				clear(s.tables)
				for i, t := range rec.Tables {
					s.tables[change.TableID{Schema: t.Schema, Name: t.Name}] = i
				}
			}
		})
		if err != nil {
			return fault.With(fault.ErrCorruptState, fmt.Sprintf("checkpoint record of %s in topic %s is unreadable; refusing to guess a position", s.opts.Name, topic), err)
		}
		if last >= end.Offset-1 {
			return nil
		}
	}
}

// table returns the state entry of id, adding it.
func (s *Sink) table(id change.TableID) *tableState {
	if i, ok := s.tables[id]; ok {
		return &s.state.Tables[i]
	}
	s.tables[id] = len(s.state.Tables)
	s.state.Tables = append(s.state.Tables, tableState{Schema: id.Schema, Name: id.Name, Props: map[string]string{}})
	return &s.state.Tables[len(s.state.Tables)-1]
}

// recordDesc describes a record for an error: its kind, table and position.
// Formatted only when a send fails, not for every record.
type recordDesc struct {
	kind  string // "table", "dead letter" or "message"
	table change.TableID
	pos   change.Position
}

func (w recordDesc) String() string {
	switch w.kind {
	case "table":
		return fmt.Sprintf("table %s at %s", w.table, w.pos)
	case "dead letter":
		return fmt.Sprintf("dead letter of %s at %s", w.table, w.pos)
	}
	return fmt.Sprintf("%s at %s", w.kind, w.pos)
}

// OpenTable creates (or verifies) the table's topic and returns its state
// as the last checkpoint recorded it.
func (s *Sink) OpenTable(ctx context.Context, id change.TableID, _ *change.Schema) (pipeline.TableState, error) {
	if err := s.ensureTopic(ctx, TableTopic(s.opts.Prefix, id), false); err != nil {
		return pipeline.TableState{}, fmt.Errorf("table %s: %w", id, err)
	}
	t := s.table(id)
	props := make(map[string]string, len(t.Props))
	for k, v := range t.Props {
		props[k] = v
	}
	return pipeline.TableState{Cursor: t.Cursor, Props: props}, nil
}

// produce sends one record asynchronously; its failure is reported by the
// next Flush.
func (s *Sink) produce(ctx context.Context, topic string, key, value []byte, what recordDesc) error {
	if n := len(key) + len(value); n > s.opts.MaxMessageBytes {
		return fault.With(ErrMessageTooLarge, fmt.Sprintf("%s: an event of %d bytes, over kafka.max_message_bytes (%d)", what, n, s.opts.MaxMessageBytes), nil)
	}
	s.errMu.Lock()
	err := s.sendErr
	s.errMu.Unlock()
	if err != nil {
		return err
	}
	size := int64(len(key) + len(value))
	if err := s.room(ctx, size, what); err != nil {
		return err
	}
	s.buffered.Add(size)
	s.cl.Produce(ctx, &kgo.Record{Topic: topic, Key: key, Value: value}, func(r *kgo.Record, err error) {
		s.buffered.Add(-size)
		select {
		case s.freed <- struct{}{}:
		default:
		}
		if err == nil {
			return
		}
		if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) {
			err = fault.With(ErrMessageTooLarge, fmt.Sprintf("%s: the broker refused an event of %d bytes as too large (topic %s)", what, size, r.Topic), err)
		} else {
			err = fault.With(ErrSendFailed, fmt.Sprintf("%s: send to topic %s", what, r.Topic), err)
		}
		s.errMu.Lock()
		if s.sendErr == nil {
			s.sendErr = err
		}
		s.errMu.Unlock()
	})
	return nil
}

// room waits until size more bytes fit in MaxBufferedBytes, the bytes
// produced and not yet acknowledged (back-pressure; a record larger than
// it waits for an empty buffer), for at most SendTimeout: with the brokers
// gone, a wait without end would be a session stuck with no error. The
// wait is bounded here, not by the record's context: kgo fails a record
// whose context ends before it is sent, and the context of a produce
// outlives the call.
func (s *Sink) room(ctx context.Context, size int64, what recordDesc) error {
	fits := func() bool {
		b := s.buffered.Load()
		return b == 0 || b+size <= s.opts.MaxBufferedBytes
	}
	if fits() {
		return nil
	}
	timer := time.NewTimer(s.opts.SendTimeout)
	defer timer.Stop()
	for !fits() {
		select {
		case <-s.freed:
		case <-timer.C:
			return fault.With(ErrSendFailed, fmt.Sprintf("%s: the brokers acknowledged too little within kafka.send_timeout (%s) to make room for it (%d bytes unacknowledged)",
				what, s.opts.SendTimeout, s.buffered.Load()), nil)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Write sends one change to its table's topic, unless it is at or below
// the table's recorded cursor (a replay).
func (s *Sink) Write(ctx context.Context, c *change.Change) error {
	t := s.table(c.Table)
	if !t.Cursor.Less(c.Pos) && c.Op != change.OpRead {
		return nil
	}
	val, err := s.enc.Change(c)
	if err != nil {
		return fmt.Errorf("kafka: encode a change of %s at %s: %w", c.Table, c.Pos, err)
	}
	key, err := s.enc.Key(c)
	if err != nil {
		return fmt.Errorf("kafka: encode the key of a change of %s at %s: %w", c.Table, c.Pos, err)
	}
	if err := s.produce(ctx, TableTopic(s.opts.Prefix, c.Table), key, val, recordDesc{"table", c.Table, c.Pos}); err != nil {
		return err
	}
	if c.Op != change.OpRead && t.Cursor.Less(c.Pos) {
		t.Cursor = c.Pos
	}
	return nil
}

// WriteBatch sends a snapshot chunk's changes; its props (the snapshot's
// progress) are recorded with the next checkpoint, after the changes.
func (s *Sink) WriteBatch(ctx context.Context, id change.TableID, cs []*change.Change, props map[string]string) error {
	for _, c := range cs {
		if err := s.Write(ctx, c); err != nil {
			return err
		}
	}
	t := s.table(id)
	if t.Props == nil {
		t.Props = map[string]string{}
	}
	for k, v := range props {
		t.Props[k] = v
	}
	return nil
}

// DeadLetter sends a row that could not be decoded to <prefix>._dead_letter.
func (s *Sink) DeadLetter(ctx context.Context, d change.DeadLetter) error {
	val, err := s.enc.DeadLetter(d)
	if err != nil {
		return err
	}
	return s.produce(ctx, s.opts.Prefix+"."+DeadLetterTopic, []byte(d.Table.String()), val, recordDesc{"dead letter", d.Table, d.Pos})
}

// Message sends a logical decoding message to <prefix>._messages.
func (s *Sink) Message(ctx context.Context, m change.Message) error {
	val, err := s.enc.Message(m)
	if err != nil {
		return err
	}
	return s.produce(ctx, s.opts.Prefix+"."+MessagesTopic, []byte(m.Prefix), val, recordDesc{kind: "message", pos: m.Pos})
}

// Buffered is the bytes produced and not yet acknowledged.
func (s *Sink) Buffered() int64 { return s.buffered.Load() }

// Flush waits until the brokers have acknowledged every record written
// before it, then records cp (with the tables' cursors and state) in the
// checkpoint topic. nil: cp may be acknowledged to the source.
func (s *Sink) Flush(ctx context.Context, cp pipeline.Checkpoint) error {
	fctx, cancel := context.WithTimeout(ctx, s.opts.SendTimeout)
	defer cancel()
	if err := s.cl.Flush(fctx); err != nil {
		if ctx.Err() == nil {
			err = fmt.Errorf("the brokers did not acknowledge the records within kafka.send_timeout (%s): %w", s.opts.SendTimeout, err)
		}
		return fault.With(ErrSendFailed, "wait for the brokers' acknowledgements", err)
	}
	s.errMu.Lock()
	err := s.sendErr
	s.errMu.Unlock()
	if err != nil {
		return err
	}
	s.state.Checkpoint = cp
	val, err := json.Marshal(s.state)
	if err != nil {
		return err
	}
	rec := &kgo.Record{Topic: s.checkpointTopic(), Partition: 0, Key: []byte(s.opts.Name), Value: val}
	if err := s.produceWait(fctx, rec); err != nil {
		return fault.With(ErrSendFailed, "record the checkpoint in "+s.checkpointTopic(), err)
	}
	s.loaded = true
	return nil
}

// produceWait sends rec and waits for the brokers' acknowledgement, at
// most until ctx is done. Not kgo's ProduceSync: with the idempotent
// producer, a record whose request reached a broker that then died is not
// failed on its context's end (failing it could break the partition's
// sequence numbers), so ProduceSync waited for the broker's return, for
// the whole outage, with no error (a session stuck without
// kafka_send_failed). The record is abandoned with the client: the Sink is
// discarded after a failed Flush.
func (s *Sink) produceWait(ctx context.Context, rec *kgo.Record) error {
	done := make(chan error, 1)
	s.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("no acknowledgement within kafka.send_timeout (%s): %w", s.opts.SendTimeout, ctx.Err())
		}
		return ctx.Err()
	}
}

// LoadCheckpoint returns the checkpoint the last Flush (or the last
// session) recorded.
func (s *Sink) LoadCheckpoint(context.Context) (pipeline.Checkpoint, bool, error) {
	return s.state.Checkpoint, s.loaded, nil
}
