package app_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/testenv"
)

// newLoader prepares `tidemark load` sessions reading the topics under
// prefix on the broker at addr into a fresh warehouse, which it returns.
func newLoader(t *testing.T, bin, srcURL, addr, prefix string, extra ...string) (*runner, string) {
	t.Helper()
	r, wh := newRunner(t, bin, srcURL)
	r.Args = append([]string{"load", "--from", "kafka://" + addr, "--topic-prefix", prefix, "--warehouse", wh,
		"--commit-interval", "200ms", "--silver-every", "300ms", "--log-level", "debug"}, extra...)
	return r, wh
}

// TestKafkaLoad: PostgreSQL → `tidemark run --sink kafka://` (3
// partitions per topic) → `tidemark load` into a lake, under a writer,
// with a standby loader of the same group beside it (it waits, then
// takes over), the loader SIGKILLed twice mid-stream and restarted, the
// capture once (it resends what it published after its last checkpoint),
// a truncate and a table created midway (its topic discovered while
// loading). At the end
// `tidemark verify` finds silver equal to the source, every bronze table
// replays to the source with no change twice (by position) and no key
// read twice by the snapshot, and the consumer group holds the loaded
// offsets (monitoring).
func TestKafkaLoad(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	k := testenv.StartKafka(t)
	srcURL := pg.CreateDB(t, "e2e_kload")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `
		CREATE TABLE orders (id bigint PRIMARY KEY, qty int NOT NULL, amount numeric(12,2), note text,
			tags text[], at timestamptz, day date, small smallint, ok boolean, raw bytea);
		CREATE TABLE items (id bigint PRIMARY KEY, name text);
		INSERT INTO orders SELECT g, 1, g * 1.25, 'preloaded ' || g, ARRAY['a', 'b' || g], now(), current_date, (g % 100)::smallint, g % 2 = 0, '\x00ff'::bytea
			FROM generate_series(1, 300) g;
		INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 50) g;`)
	cr, _ := newRunner(t, bin, srcURL, "--sink", "kafka://"+k.Addr, "--kafka-partitions", "3")
	capt := cr.Start()
	lr, wh := newLoader(t, bin, srcURL, k.Addr, source)
	load := lr.Start()
	// A second loader of the same lake and group: it must wait while the
	// other holds the lake, and take over when that one is killed (with
	// both writing, every change would be in bronze twice).
	time.Sleep(time.Second)
	standby := lr.Start()

	conn := connect(t, srcURL)
	defer conn.Close(context.Background())
	rng := rand.New(rand.NewPCG(7, 9))
	next := int64(1000)
	lk := openLake(t, wh, source)
	lastOffsets := ""
	for round := 0; round < 40; round++ {
		sql := fmt.Sprintf(`INSERT INTO orders SELECT g, 1, g / 3.0, 'new ' || g, ARRAY['n'], now(), current_date, 1, true, NULL FROM generate_series(%d, %d) g;
			UPDATE orders SET qty = qty + 1, note = 'round %d', amount = amount + 0.01, tags = tags || 'r%d'::text WHERE id %% 11 = %d;
			DELETE FROM orders WHERE id = %d;
			INSERT INTO items VALUES (%d, 'item %d') ON CONFLICT (id) DO UPDATE SET name = excluded.name;`,
			next, next+19, round, round, rng.IntN(11), rng.Int64N(next), rng.Int64N(200), round)
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
		next += 20
		if round == 15 || round == 30 {
			// Mid-stream: after the loader has committed something since
			// its start, at a random moment of its next commit cycle.
			var cp pipeline.Checkpoint
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				cp, _ = lk.checkpoint()
				if o := cp.Info["kafka-offsets"]; o != "" && o != lastOffsets {
					lastOffsets = o
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the loader committed nothing within 30s of round %d", round)
				}
			}
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			load.Kill(t)
			t.Logf("loader SIGKILLed at round %d; the lake's checkpoint held offsets %s", round, cp.Info["kafka-offsets"])
			load = lr.Start()
		}
		if round == 16 {
			// Two events the loader cannot read, between the capture's
			// (the topic exists: the loader has loaded from it):
			// dead-lettered with their reason, never skipped, never fatal.
			produceRaw(t, k.Addr, source+".public.orders", []byte("not json"),
				[]byte(`{"schema":{"type":"struct","fields":[{"type":"struct","field":"after","fields":[{"type":"int64","optional":false,"field":"id"}]}]},`+
					`"payload":{"after":{"id":"x"},"op":"c","source":{"connector":"postgresql","ts_ms":1,"schema":"public","table":"orders","lsn":1,"sequence":"[\"1\",\"1\"]"}}}`))
		}
		if round == 25 {
			// A table created while loading: its topic is discovered, its
			// tables created.
			pg.Exec(t, srcURL, `CREATE TABLE late (id bigint PRIMARY KEY, v text);
				INSERT INTO late SELECT g, 'late ' || g FROM generate_series(1, 40) g;`)
		}
		if round > 25 {
			if _, err := conn.Exec(context.Background(), fmt.Sprintf(`UPDATE late SET v = 'round %d' WHERE id = %d`, round, round)); err != nil {
				t.Fatal(err)
			}
		}
		if round == 28 {
			// A truncate (keyless: in any partition) among the keyed
			// changes of the other partitions.
			pg.Exec(t, srcURL, `TRUNCATE items; INSERT INTO items SELECT g, 'after truncate ' || g FROM generate_series(1, 30) g`)
		}
		if round == 22 {
			// The capture crashes too: it resends what it published after
			// its last checkpoint, which the loader must not load twice.
			capt.Kill(t)
			capt = cr.Start()
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Caught up: the lake's checkpoint (the capture's, once loaded up to
	// it) confirms the WAL's end.
	end := walLSN(t, srcURL)
	lk.waitCaughtUp(standby, end, 2*time.Minute, "orders", "items", "late")
	lk.close()
	// As checkSilver: a one-shot merge drains bronze into silver while the
	// loader is stopped, then verify compares with capture and loader
	// running (verify waits for silver to reach the source's position).
	for _, l := range []*session{load, standby} {
		if code := l.Stop(t, time.Minute); code != 0 {
			t.Fatalf("tidemark load session %d exited with code %d after SIGTERM, want 0", l.N, code)
		}
	}
	if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", source).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	}
	load = lr.Start()
	out, err := exec.Command(bin, "verify", "--source", srcURL, "--warehouse", wh, "--name", source, "--wait", "2m").CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark verify: %v\n%s", err, out)
	}
	t.Logf("tidemark verify:\n%s", strings.TrimSpace(string(out)))
	// status reads a loaded lake as a captured one.
	out, err = exec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "public.orders") || !strings.Contains(string(out), "public.late") {
		t.Errorf("tidemark status: %v, want the tables listed\n%s", err, out)
	}
	if code := load.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark load exited with code %d after SIGTERM, want 0", code)
	}
	if code := capt.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark run exited with code %d after SIGTERM, want 0", code)
	}
	for _, table := range []string{"orders", "items", "late"} {
		verifyTable(t, srcURL, wh, source, table, []string{"id"}, nil)
	}
	dead := bronzetest.Read(t, wh, "bronze", source, bronze.DeadLetterTable)
	for _, reason := range []string{"not_json", "bad_value"} {
		n := 0
		for _, row := range dead {
			e, _ := row[bronze.ColError].(string)
			if strings.Contains(e, "kafka event "+reason+": topic "+source+".public.orders partition 0 offset ") && row[bronze.ColTable] == "public.orders" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("bronze %s._dead_letter holds %d rows of reason %s for public.orders, want 1: %v", source, n, reason, dead)
		}
	}

	// The group holds what the lake loaded, for kafka-consumer-groups.
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	committed, err := adm.FetchOffsets(ctx, "tidemark-load-"+source)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, source+".public.orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(ends[source+".public.orders"]) != 3 {
		t.Errorf("topic %s.public.orders has %d partitions, want 3", source, len(ends[source+".public.orders"]))
	}
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(o.Topic, o.Partition)
		if !ok || c.At != o.Offset {
			t.Errorf("group tidemark-load-%s: %s partition %d committed %v, want the end offset %d", source, o.Topic, o.Partition, c.At, o.Offset)
		}
	})
}

// TestKafkaLoadGap: records deleted before `tidemark load` read them
// (DeleteRecords, as retention would) stop it with kafka_gap (exit 3),
// naming the topic, the partition and the offsets; so does a loader
// into a fresh lake whose topics no longer start at offset 0.
func TestKafkaLoadGap(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	k := testenv.StartKafka(t)
	srcURL := pg.CreateDB(t, "e2e_kgap")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `
		CREATE TABLE orders (id bigint PRIMARY KEY, note text);
		INSERT INTO orders SELECT g, 'preloaded ' || g FROM generate_series(1, 100) g;`)
	cr, _ := newRunner(t, bin, srcURL, "--sink", "kafka://"+k.Addr)
	capt := cr.Start()
	lr, wh := newLoader(t, bin, srcURL, k.Addr, source)
	load := lr.Start()
	openLake(t, wh, source).waitCaughtUp(load, walLSN(t, srcURL), 2*time.Minute, "orders")
	if code := load.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark load exited with code %d after SIGTERM, want 0", code)
	}
	// Changes the loader has not read, then deleted from the topic.
	pg.Exec(t, srcURL, `UPDATE orders SET note = 'lost' WHERE id <= 10`)
	conn := connect(t, srcURL)
	defer conn.Close(context.Background())
	waitConfirmed(t, conn, "tidemark_"+source, walLSN(t, srcURL), capt, time.Minute)
	if code := capt.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark run exited with code %d after SIGTERM, want 0", code)
	}
	topic := source + ".public.orders"
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: end.Offset, LeaderEpoch: -1})
	if resp, err := adm.DeleteRecords(ctx, del); err != nil || resp.Error() != nil {
		t.Fatalf("DeleteRecords %s up to %d: %v %v", topic, end.Offset, err, resp.Error())
	}

	for _, c := range []struct {
		what string
		r    *runner
	}{{"the loader resumed", lr}, {"a loader into a fresh lake", func() *runner { r, _ := newLoader(t, bin, srcURL, k.Addr, source); return r }()}} {
		cmd := exec.Command(bin, c.r.Args...)
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("%s: tidemark load did not stop on the gap within a minute\n%s", c.what, out)
		}
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 3 || !strings.Contains(string(out), "[kafka_gap]") || !strings.Contains(string(out), "topic "+topic+" partition 0") {
			t.Fatalf("%s: %v, want exit 3 with [kafka_gap] naming topic %s partition 0\n%s", c.what, err, topic, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "[kafka_gap]") {
				t.Logf("%s: %s", c.what, line)
			}
		}
	}
}

// produceRaw writes values to partition 0 of topic, without a key.
func produceRaw(t *testing.T, addr, topic string, values ...[]byte) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: v}).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
	}
}

// TestKafkaLoadMySQL: MariaDB → `tidemark run --sink kafka://` → `tidemark
// load`, the loader SIGKILLed once: each change keeps the position the
// sink wrote (binlog file number and pos, row), `tidemark verify` finds
// silver equal to the source, and bronze holds no change twice.
func TestKafkaLoadMySQL(t *testing.T) {
	bin := testenv.Tidemark(t)
	m := testenv.SharedMariaDB(t)
	k := testenv.StartKafka(t)
	dbname := m.CreateDB(t, "myload")
	source := strings.ToLower(dbname)
	m.ExecIn(t, dbname, `CREATE TABLE orders (id bigint PRIMARY KEY, qty int NOT NULL, note varchar(50), amount decimal(10,2), at datetime(6))`)
	m.ExecIn(t, dbname, `INSERT INTO orders SELECT seq, 1, CONCAT('pre ', seq), seq / 4, NOW(6) FROM seq_1_to_200`)
	cr, _ := newRunner(t, bin, m.URL(dbname), "--sink", "kafka://"+k.Addr, "--topic-prefix", "myl", "--kafka-partitions", "2")
	capt := cr.Start()
	lr, wh := newLoader(t, bin, m.URL(dbname), k.Addr, "myl")
	load := lr.Start()
	// The writes start once the loader has loaded the snapshot's first
	// rows: they travel as changes, not in the snapshot.
	lk := openLake(t, wh, source)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, ok := lk.checkpoint(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the loader committed nothing within a minute")
		}
	}
	lk.close()
	for round := 0; round < 20; round++ {
		m.ExecIn(t, dbname, fmt.Sprintf(`INSERT INTO orders SELECT seq, 1, 'new', seq / 3, NOW(6) FROM seq_%d_to_%d`, 1000+round*10, 1009+round*10))
		m.ExecIn(t, dbname, fmt.Sprintf(`UPDATE orders SET qty = qty + 1, note = 'round %d', amount = amount + 1 WHERE id %% 7 = %d`, round, round%7))
		m.ExecIn(t, dbname, fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, 3+round*9))
		if round == 10 {
			load.Kill(t)
			load = lr.Start()
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Silver must be published before verify compares it: wait, then
	// compare with capture and loader running.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, code := tidemarkArgs(t, "verify", "--source", m.URL(dbname), "--warehouse", wh, "--name", source, "--wait", "30s")
		if code == 0 {
			t.Logf("tidemark verify:\n%s", strings.TrimSpace(out))
			break
		}
		if load.Exited() || capt.Exited() || time.Now().After(deadline) {
			t.Fatalf("tidemark verify: exit %d\n%s", code, out)
		}
		time.Sleep(time.Second)
	}
	if code := load.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark load exited with code %d after SIGTERM, want 0", code)
	}
	if code := capt.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark run exited with code %d after SIGTERM, want 0", code)
	}
	rows := bronzetest.Read(t, wh, bronze.Ident(source, change.TableID{Schema: dbname, Name: "orders"})...)
	if d := bronzetest.Duplicates(rows); len(d) > 0 {
		t.Errorf("bronze %s.orders holds %d changes twice: %v", dbname, len(d), d[:min(len(d), 10)])
	}
	ops := map[string]int{}
	for _, r := range rows {
		ops[r.Op()]++
	}
	if ops["u"] == 0 || ops["d"] == 0 {
		t.Errorf("bronze %s.orders: %v, want streamed updates and deletes", dbname, ops)
	}
	t.Logf("bronze %s.orders: %d rows %v", dbname, len(rows), ops)
}
