package cdc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/cdc"
	"github.com/tidemark/tidemark/internal/testenv"
)

var server struct {
	once sync.Once
	pg   *testenv.PG
	err  error
	n    int
}

func TestMain(m *testing.M) {
	code := m.Run()
	if server.pg != nil {
		_ = server.pg.Stop()
	}
	os.Exit(code)
}

// newDatabase starts the package's PostgreSQL server on first use,
// creates a database on it and runs setup there; it returns the URL.
func newDatabase(setup string) (string, error) {
	server.once.Do(func() { server.pg, server.err = testenv.Start(testenv.Options{}) })
	if server.err != nil {
		return "", server.err
	}
	server.n++
	name := fmt.Sprintf("cdc_%d_%d", os.Getpid(), server.n)
	if err := execSQL(server.pg.URL("postgres"), "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	url := server.pg.URL(name)
	return url, execSQL(url, setup)
}

func execSQL(url, sql string) error {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

// exampleSource is a PostgreSQL database with a table orders, for the
// examples.
func exampleSource() string {
	url, err := newDatabase(`CREATE TABLE orders (id int PRIMARY KEY, amount numeric(10,2), placed date)`)
	if err != nil {
		panic(err)
	}
	return url
}

// exampleWrite runs statements on the source, as the application does.
func exampleWrite(url string, stmts ...string) {
	for _, s := range stmts {
		if err := execSQL(url, s); err != nil {
			panic(err)
		}
	}
}

func database(t *testing.T, setup string) string {
	t.Helper()
	url, err := newDatabase(setup)
	if errors.Is(err, testenv.ErrNoPostgres) && os.Getenv("TIDEMARK_REQUIRE_PG") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// TestMaxRuntimeWhileIdle: on an idle database, a Next that is waiting
// returns io.EOF once MaxRuntime has passed: MaxRuntime ends the
// stream, not PollTimeout (ten times longer), and not later.
func TestMaxRuntimeWhileIdle(t *testing.T) {
	url := database(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	const runtime, poll = 3 * time.Second, 30 * time.Second
	start := time.Now()
	s, err := cdc.Open(context.Background(), cdc.Config{Source: url, MaxRuntime: runtime, PollTimeout: poll})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev, err := s.Next(context.Background())
	elapsed := time.Since(start)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("Next on an idle database = %+v, %v; want io.EOF", ev, err)
	}
	if elapsed < runtime {
		t.Errorf("the stream ended after %s, before MaxRuntime %s", elapsed, runtime)
	}
	if elapsed >= poll {
		t.Errorf("the stream ended after %s: by PollTimeout %s, not MaxRuntime %s", elapsed, poll, runtime)
	}
}

// TestEventsTypedAndJSON: events come in order with their typed values,
// positions increasing, JSON in the chosen shape; Ack in order; a
// debug-level Logger gets tidemark's logs, never the password.
func TestEventsTypedAndJSON(t *testing.T) {
	url := database(t, `CREATE TABLE t (id int PRIMARY KEY, amount numeric(10,2), day date, at timestamptz, note text)`)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := cdc.Open(context.Background(), cdc.Config{Source: url, Tables: []string{"public.t"}, MaxRecords: 3,
		MaxRuntime: 2 * time.Minute, Format: "debezium", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exampleWrite(url, `INSERT INTO t VALUES (1, 9.99, '2024-05-06', '2024-05-06 07:08:09.5+00', 'a')`,
		`UPDATE t SET amount = 10.50 WHERE id = 1`, `DELETE FROM t WHERE id = 1`)
	var evs []cdc.Event
	for {
		ev, err := s.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Ack(ev); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3 (MaxRecords)", len(evs))
	}
	ins, upd, del := evs[0], evs[1], evs[2]
	if ins.Op != cdc.Insert || ins.Table != (cdc.Table{Schema: "public", Name: "t"}) || ins.After["id"] != int32(1) ||
		ins.After["amount"] != "9.99" || ins.After["note"] != "a" ||
		ins.After["day"] != time.Date(2024, 5, 6, 0, 0, 0, 0, time.UTC) ||
		!ins.After["at"].(time.Time).Equal(time.Date(2024, 5, 6, 7, 8, 9, 500000000, time.UTC)) {
		t.Errorf("insert: %+v", ins)
	}
	if upd.Op != cdc.Update || upd.After["amount"] != "10.50" {
		t.Errorf("update: %+v", upd)
	}
	if del.Op != cdc.Delete || del.After != nil || del.Before["id"] != int32(1) {
		t.Errorf("delete: %+v", del)
	}
	if !(ins.Position.Less(upd.Position) && upd.Position.Less(del.Position)) || ins.TxID == 0 || ins.CommitTime.IsZero() {
		t.Errorf("positions %v %v %v, tx %d, commit %s", ins.Position, upd.Position, del.Position, ins.TxID, ins.CommitTime)
	}
	if !strings.Contains(string(upd.JSON), `"amount":"BBo="`) || !strings.Contains(string(upd.JSON), `"connector":"postgresql"`) {
		t.Errorf("update JSON not in the debezium shape: %s", upd.JSON)
	}
	if s.Acked() != del.Position {
		t.Errorf("Acked = %v, want %v", s.Acked(), del.Position)
	}
	if err := s.Ack(ins); err == nil {
		t.Error("an ack out of order was accepted")
	}
	pc, _ := pgx.ParseConfig(url)
	if !strings.Contains(logs.String(), "capture starting") {
		t.Errorf("the capture logged nothing to Config.Logger: the canary checks nothing\n%s", &logs)
	}
	if strings.Contains(logs.String(), pc.Password) {
		t.Error("the password appears in the logs")
	}
}
