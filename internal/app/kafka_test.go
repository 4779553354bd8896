package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/internal/testenv"
)

// kafkaEvent is the part of a Debezium change event the test reads.
type kafkaEvent struct {
	Op     string         `json:"op"`
	Before map[string]any `json:"before"`
	After  map[string]any `json:"after"`
	Source struct {
		LSN      int64  `json:"lsn"`
		Sequence string `json:"sequence"`
		Snapshot string `json:"snapshot"`
		Table    string `json:"table"`
		// MySQL: the transaction's binlog coordinate and the change's
		// number in it.
		File string `json:"file"`
		Pos  int64  `json:"pos"`
		Row  int64  `json:"row"`
	} `json:"source"`
}

// TestKafkaSink: `tidemark run --sink kafka://` against a real broker,
// under a writer, SIGKILLed twice and restarted. The topics exist with
// tidemark's retention before the first event; every change arrives as a
// Debezium event keyed by the primary key; after deduplication on the
// position, folding each table's events by key gives the source's rows;
// the snapshot's rows arrive as op r; and a topic whose retention would
// delete unread data is refused at start.
func TestKafkaSink(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	k := testenv.StartKafka(t)
	srcURL := pg.CreateDB(t, "e2e_kafka")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `
		CREATE TABLE orders (id bigint PRIMARY KEY, qty int NOT NULL, note text);
		CREATE TABLE items (id bigint PRIMARY KEY, name text);
		INSERT INTO orders SELECT g, 1, 'preloaded ' || g FROM generate_series(1, 300) g;
		INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 50) g;`)
	r, _ := newRunner(t, bin, srcURL, "--sink", "kafka://"+k.Addr)
	s := r.Start()

	conn := connect(t, srcURL)
	defer conn.Close(context.Background())
	rng := rand.New(rand.NewPCG(5, 8))
	next := int64(1000)
	for round := 0; round < 30; round++ {
		sql := fmt.Sprintf(`INSERT INTO orders SELECT g, 1, 'new ' || g FROM generate_series(%d, %d) g;
			UPDATE orders SET qty = qty + 1, note = 'round %d' WHERE id %% 11 = %d;
			DELETE FROM orders WHERE id = %d;
			INSERT INTO items VALUES (%d, 'item %d') ON CONFLICT (id) DO UPDATE SET name = excluded.name;`,
			next, next+19, round, rng.IntN(11), rng.Int64N(next), rng.Int64N(200), round)
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
		next += 20
		if round == 10 || round == 20 {
			time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
			s.Kill(t)
			s = r.Start()
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Caught up: the slot confirms the WAL's end only once the brokers
	// hold every event before it.
	end := walLSN(t, srcURL)
	waitConfirmed(t, conn, "tidemark_"+source, end, s, 2*time.Minute)
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, tb := range []string{"orders", "items"} {
		topic := source + ".public." + tb
		rcs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := rcs.On(topic, nil)
		if err != nil || rc.Err != nil {
			t.Fatalf("topic %s: %v %v", topic, err, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == "retention.ms" && (c.Value == nil || *c.Value != "604800000") {
				t.Errorf("topic %s: retention.ms = %v, want 7 days", topic, c.Value)
			}
		}
		events := consumeTopic(t, ctx, k.Addr, topic)
		replica, snapshotRows := foldEvents(t, topic, events)
		want := map[string]string{}
		rows, err := conn.Query(context.Background(), fmt.Sprintf(`SELECT id::text, row_to_json(t)::text FROM %s t`, tb))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, js string
			if err := rows.Scan(&id, &js); err != nil {
				t.Fatal(err)
			}
			want[id] = canonJSON(t, js)
		}
		rows.Close()
		var bad []string
		for id, w := range want {
			if g, ok := replica[id]; !ok || g != w {
				bad = append(bad, fmt.Sprintf("id %s: source %s, topic %s", id, w, g))
			}
		}
		for id := range replica {
			if _, ok := want[id]; !ok {
				bad = append(bad, fmt.Sprintf("id %s: in the topic's fold, not in the source", id))
			}
		}
		sort.Strings(bad)
		if len(bad) > 0 {
			t.Errorf("topic %s folded by key differs from the source in %d keys: %v", topic, len(bad), head(bad))
		}
		if snapshotRows == 0 {
			t.Errorf("topic %s: no snapshot (op r) event", topic)
		}
		t.Logf("topic %s: %d events, %d snapshot rows, %d keys equal to the source", topic, len(events), snapshotRows, len(want))
	}

	// A topic whose retention would delete what was acknowledged: refused
	// before anything is sent.
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": ptrTo("0")}, "short.public.orders"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, append(r.As("run"), "--topic-prefix", "short")...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "kafka_retention") {
		t.Fatalf("run onto a topic with retention.ms=0: %v, want exit 2 naming kafka_retention\n%s", err, out)
	}
}

func ptrTo(s string) *string { return &s }

// slotConfirmedLSN is the slot's confirmed_flush_lsn, as an integer (0
// while tidemark has not created the slot yet).
func slotConfirmedLSN(t *testing.T, conn *pgx.Conn, slot string) uint64 {
	t.Helper()
	var confirmed uint64
	err := conn.QueryRow(context.Background(), `SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1`,
		slot).Scan(&confirmed)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return confirmed
}

// waitConfirmed waits until the slot confirms end: tidemark acknowledged
// everything up to it, failing if s exits or timeout passes.
func waitConfirmed(t *testing.T, conn *pgx.Conn, slot string, end uint64, s *session, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		confirmed := slotConfirmedLSN(t, conn, slot)
		if confirmed >= end {
			return
		}
		if s.Exited() {
			t.Fatalf("tidemark exited: %v", s.Err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot did not confirm %d within %s (at %d)", end, timeout, confirmed)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// consumeTopic reads every record of topic (all partitions) up to its
// current end.
func consumeTopic(t *testing.T, ctx context.Context, addr, topic string) []*kgo.Record {
	t.Helper()
	adm, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
	adm.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	got := map[int32]int64{}
	done := func() bool {
		for p, e := range want {
			if got[p] < e {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume %s: %v", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			got[r.Partition] = r.Offset + 1
		})
	}
	return out
}

// foldEvents dedupes a table topic's events on their position and folds
// them by key, in the topic's order (one key's events are in one
// partition, in order): key -> the row's canonical JSON.
func foldEvents(t *testing.T, topic string, recs []*kgo.Record) (map[string]string, int) {
	t.Helper()
	replica := map[string]string{}
	seen := map[string]bool{}
	snapshot := 0
	for _, r := range recs {
		// Kafka Connect's JSON with schemas: {"schema": …, "payload": …}.
		var value struct {
			Schema  struct{ Name string } `json:"schema"`
			Payload kafkaEvent            `json:"payload"`
		}
		if err := json.Unmarshal(r.Value, &value); err != nil || !strings.HasSuffix(value.Schema.Name, ".Envelope") {
			t.Fatalf("%s offset %d: not a Debezium event with its schema: %v\n%s", topic, r.Offset, err, r.Value)
		}
		ev := value.Payload
		var keyEnv struct {
			Schema struct {
				Name   string
				Fields []struct{ Field, Type string }
			} `json:"schema"`
			Payload map[string]any `json:"payload"`
		}
		if err := json.Unmarshal(r.Key, &keyEnv); err != nil || len(keyEnv.Payload) != 1 || len(keyEnv.Schema.Fields) != 1 ||
			keyEnv.Schema.Fields[0].Field != "id" || keyEnv.Schema.Fields[0].Type != "int64" || !strings.HasSuffix(keyEnv.Schema.Name, ".Key") {
			t.Fatalf("%s offset %d: key %s is not Debezium's {\"schema\": int64 id, \"payload\": {\"id\": …}}", topic, r.Offset, r.Key)
		}
		key := keyEnv.Payload
		id := fmt.Sprint(key["id"])
		pos := fmt.Sprintf("%d/%s/%s:%d:%d/%s", ev.Source.LSN, ev.Source.Sequence, ev.Source.File, ev.Source.Pos, ev.Source.Row, ev.Op)
		if ev.Op != "r" {
			if seen[pos] {
				continue // a resend after a crash: at least once
			}
			seen[pos] = true
		}
		switch ev.Op {
		case "r", "c", "u":
			if fmt.Sprint(ev.After["id"]) != id {
				t.Fatalf("%s offset %d: key %s, after.id %v", topic, r.Offset, r.Key, ev.After["id"])
			}
			b, _ := json.Marshal(ev.After)
			replica[id] = canonJSON(t, string(b))
			if ev.Op == "r" {
				snapshot++
			}
		case "d":
			delete(replica, id)
		default:
			t.Fatalf("%s offset %d: op %q", topic, r.Offset, ev.Op)
		}
	}
	return replica, snapshot
}

// canonJSON re-marshals a JSON object with sorted keys and numbers as
// written.
func canonJSON(t *testing.T, s string) string {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// TestKafkaSinkBrokerKilled: the broker is SIGKILLed in the middle of a
// stream and restarted. tidemark does not exit and does not lose a change:
// the sends fail (kafka_send_failed), nothing after the last checkpoint is
// acknowledged to the source, and once the broker is back the session that
// follows resends from there, so the topic folded by key equals the source.
//
// It once hung (no kafka_send_failed for 90 s with the broker down): the
// checkpoint record's send waited for an acknowledgement that the
// idempotent producer never gives up on; a goroutine dump on that timeout
// (below) found it.
func TestKafkaSinkBrokerKilled(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	k := testenv.StartKafka(t)
	srcURL := pg.CreateDB(t, "e2e_kafka_kill")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `CREATE TABLE orders (id bigint PRIMARY KEY, qty int NOT NULL, note text)`)
	r, _ := newRunner(t, bin, srcURL, "--sink", "kafka://"+k.Addr, "--kafka-send-timeout", "3s",
		"--retry-max-backoff", "2s", "--retry-max-elapsed", "5m")
	s := r.Start()
	conn := connect(t, srcURL)
	defer conn.Close(context.Background())
	write := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if _, err := conn.Exec(context.Background(), fmt.Sprintf(`INSERT INTO orders VALUES (%d, 1, 'x'); UPDATE orders SET qty = qty + 1 WHERE id = %d`, i, i-1)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	write(1, 100)
	k.Kill()
	// Write while the broker is down until the capture has tried to send
	// and failed (on a loaded machine the capture may lag the writes).
	logHas := func(s string) bool {
		b, _ := os.ReadFile(r.LogPath)
		return strings.Contains(string(b), s)
	}
	next := 101
	for downSince := time.Now(); !logHas("kafka_send_failed"); next += 20 {
		if time.Since(downSince) > 90*time.Second {
			// Where it waits: a goroutine dump (SIGQUIT) into its log.
			_ = s.Cmd.Process.Signal(syscall.SIGQUIT)
			<-s.Done
			b, _ := os.ReadFile(r.LogPath)
			dump := filepath.Join(os.TempDir(), fmt.Sprintf("tidemark-kafka-hang-%d.log", s.Cmd.Process.Pid))
			_ = os.WriteFile(dump, b, 0o644)
			t.Fatalf("no kafka_send_failed in the log 90 s into the broker's outage, with writes going on; its log with a goroutine dump: %s", dump)
		}
		if s.Exited() {
			t.Fatalf("tidemark exited while the broker was down: %v", s.Err)
		}
		write(next, 20)
	}
	confirmedDown := slotConfirmedLSN(t, conn, "tidemark_"+source)
	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	write(next, 100)
	end := walLSN(t, srcURL)
	if confirmedDown >= end {
		t.Fatalf("the slot confirmed %d, past the WAL end %d written while the broker was down", confirmedDown, end)
	}
	waitConfirmed(t, conn, "tidemark_"+source, end, s, 3*time.Minute)
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := source + ".public.orders"
	replica, _ := foldEvents(t, topic, consumeTopic(t, ctx, k.Addr, topic))
	rows, err := conn.Query(context.Background(), `SELECT id::text, row_to_json(t)::text FROM orders t`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n, bad := 0, 0
	for rows.Next() {
		var id, js string
		if err := rows.Scan(&id, &js); err != nil {
			t.Fatal(err)
		}
		n++
		if replica[id] != canonJSON(t, js) {
			if bad++; bad <= 5 {
				t.Errorf("id %s: source %s, topic %s", id, js, replica[id])
			}
		}
	}
	if bad > 0 || len(replica) != n {
		t.Fatalf("%d of %d keys differ; the topic folds to %d keys", bad, n, len(replica))
	}
}

// TestKafkaSinkMySQL: the same sink on a MariaDB source (binlog positions,
// its snapshot reconciliation), killed once: the table's topic folded by
// key comes to equal the source.
func TestKafkaSinkMySQL(t *testing.T) {
	bin := testenv.Tidemark(t)
	m := testenv.SharedMariaDB(t)
	k := testenv.StartKafka(t)
	dbname := m.CreateDB(t, "mykafka")
	m.ExecIn(t, dbname, `CREATE TABLE orders (id bigint PRIMARY KEY, qty int NOT NULL, note varchar(50))`)
	m.ExecIn(t, dbname, `INSERT INTO orders SELECT seq, 1, CONCAT('pre ', seq) FROM seq_1_to_200`)
	r, _ := newRunner(t, bin, m.URL(dbname), "--sink", "kafka://"+k.Addr, "--topic-prefix", "my")
	s := r.Start()
	for round := 0; round < 20; round++ {
		m.ExecIn(t, dbname, fmt.Sprintf(`INSERT INTO orders SELECT seq, 1, 'new' FROM seq_%d_to_%d`, 1000+round*10, 1009+round*10))
		m.ExecIn(t, dbname, fmt.Sprintf(`UPDATE orders SET qty = qty + 1, note = 'round %d' WHERE id %% 7 = %d`, round, round%7))
		m.ExecIn(t, dbname, fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, 3+round*9))
		if round == 8 {
			s.Kill(t)
			s = r.Start()
		}
		time.Sleep(50 * time.Millisecond)
	}
	db, err := sql.Open("mysql", m.RootDSN(dbname))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id, JSON_OBJECT('id', id, 'qty', qty, 'note', note) FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for rows.Next() {
		var id, js string
		if err := rows.Scan(&id, &js); err != nil {
			t.Fatal(err)
		}
		want[id] = canonJSON(t, js)
	}
	rows.Close()
	topic := "my." + dbname + ".orders"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	deadline := time.Now().Add(time.Minute)
	var diff []string
	for {
		replica, snap := foldEvents(t, topic, consumeTopic(t, ctx, k.Addr, topic))
		diff = diff[:0]
		for id, w := range want {
			if replica[id] != w {
				diff = append(diff, fmt.Sprintf("id %s: source %s, topic %s", id, w, replica[id]))
			}
		}
		if len(diff) == 0 && len(replica) == len(want) && snap > 0 {
			break
		}
		if s.Exited() {
			t.Fatalf("tidemark exited: %v", s.Err)
		}
		if time.Now().After(deadline) {
			sort.Strings(diff)
			t.Fatalf("the topic folded by key did not come to equal the source in a minute: %d keys differ %v, %d keys, %d snapshot rows", len(diff), head(diff), len(replica), snap)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
}

// TestKafkaSinkMessageSize: a 16 MiB value passes with the default
// settings (kafka.max_message_bytes 20 MiB, the topic's max.message.bytes
// set to it); a larger event stops the pipeline with
// kafka_message_too_large (exit 3) naming the setting to raise, and the
// slot is not confirmed past it: nothing after it is acknowledged.
func TestKafkaSinkMessageSize(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	k := testenv.StartKafka(t)
	srcURL := pg.CreateDB(t, "e2e_kafka_size")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `CREATE TABLE docs (id bigint PRIMARY KEY, body text);
		ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
		INSERT INTO docs VALUES (0, 'small')`)
	r, _ := newRunner(t, bin, srcURL, "--sink", "kafka://"+k.Addr, "--log-level", "info")
	s := r.Start()
	conn := connect(t, srcURL)
	defer conn.Close(context.Background())
	pg.Exec(t, srcURL, `INSERT INTO docs VALUES (1, `+randomText(16)+`)`)
	waitConfirmed(t, conn, "tidemark_"+source, walLSN(t, srcURL), s, 2*time.Minute)

	pg.Exec(t, srcURL, `INSERT INTO docs VALUES (2, `+randomText(24)+`)`)
	end := walLSN(t, srcURL)
	select {
	case <-s.Done:
	case <-time.After(2 * time.Minute):
		t.Fatal("tidemark did not stop at an event over kafka.max_message_bytes")
	}
	if code := s.Cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("tidemark exited with code %d at an event over kafka.max_message_bytes, want 3", code)
	}
	logs, _ := os.ReadFile(r.LogPath)
	if !strings.Contains(string(logs), "kafka_message_too_large") || !strings.Contains(string(logs), "kafka.max_message_bytes") {
		t.Fatalf("the log names no kafka_message_too_large and kafka.max_message_bytes:\n%s", logs)
	}
	if confirmed := slotConfirmedLSN(t, conn, "tidemark_"+source); confirmed >= end {
		t.Fatalf("the slot confirmed %d, past the oversized event's transaction (end %d)", confirmed, end)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := source + ".public.docs"
	var want int
	if err := conn.QueryRow(context.Background(), `SELECT length(body) FROM docs WHERE id = 1`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, rec := range consumeTopic(t, ctx, k.Addr, topic) {
		var ev struct {
			Payload struct {
				After map[string]any `json:"after"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(rec.Value, &ev); err != nil {
			t.Fatalf("record at offset %d: %v", rec.Offset, err)
		}
		if body, ok := ev.Payload.After["body"].(string); ok {
			got[fmt.Sprint(ev.Payload.After["id"])] = len(body)
		}
	}
	if got["1"] != want || len(got) != 2 {
		t.Fatalf("the topic holds bodies of lengths %v, want the 16 MiB one (id 1: %d bytes) and the small one, not the oversized one", got, want)
	}
}
