package bronze_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// A checkpoint reads back as it was flushed: position, resume token,
// watermark and every Info entry (stored as tidemark.<key>).
func TestCheckpointRoundTrip(t *testing.T) {
	ctx := context.Background()
	cat, w := openWriter(t, t.TempDir())
	want := pipeline.Checkpoint{Pos: 700, Resume: "mysql-bin.000007:1234;0-1-42",
		Watermark: time.Date(2026, 12, 2, 1, 2, 3, 4000, time.UTC),
		Info:      map[string]string{"binlog-file": "mysql-bin.000007", "server-uuid": "u-1"}}
	if err := w.Flush(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := bronze.LoadCheckpoint(ctx, cat, "src")
	if err != nil || !ok {
		t.Fatalf("LoadCheckpoint: ok=%v err=%v", ok, err)
	}
	if got.Pos != want.Pos || got.Resume != want.Resume || !got.Watermark.Equal(want.Watermark) || !reflect.DeepEqual(got.Info, want.Info) {
		t.Fatalf("checkpoint read back as %+v, want %+v", got, want)
	}
	props, err := cat.NamespaceProperties(ctx, bronze.SourceNamespace("src"))
	if err != nil {
		t.Fatal(err)
	}
	if props["tidemark.server-uuid"] != "u-1" || props[bronze.PropResume] != want.Resume || props[bronze.PropCommitLSN] != "700" {
		t.Fatalf("namespace properties %v: want tidemark.server-uuid, tidemark.resume and tidemark.commit-lsn", props)
	}
}

// A lake written before tidemark.resume existed (PostgreSQL: the resume
// position is tidemark.acked-lsn) resumes where it stopped.
func TestCheckpointOfAnOlderLake(t *testing.T) {
	ctx := context.Background()
	cat, _ := openWriter(t, t.TempDir())
	if err := cat.SetNamespaceProperties(ctx, bronze.SourceNamespace("src"), map[string]string{
		"tidemark.acked-lsn": "1001", "tidemark.commit-lsn": "1000", "tidemark.wal-end": "2000",
		"tidemark.slot": "tidemark_src", "tidemark.watermark": "2026-12-01T10:00:00Z", "tidemark.updated-at": "2026-12-01T10:00:01Z",
	}); err != nil {
		t.Fatal(err)
	}
	cp, ok, err := bronze.LoadCheckpoint(ctx, cat, "src")
	if err != nil || !ok {
		t.Fatalf("LoadCheckpoint: ok=%v err=%v", ok, err)
	}
	if cp.Resume != "1001" || cp.Pos != 1000 || cp.Info["wal-end"] != "2000" || cp.Info["slot"] != "tidemark_src" || cp.Info["acked-lsn"] != "1001" {
		t.Fatalf("older lake's checkpoint read as %+v", cp)
	}
	if _, ok := cp.Info["updated-at"]; ok {
		t.Errorf("Info holds the checkpoint's own key updated-at: %v", cp.Info)
	}
}

// An Info key that would overwrite the checkpoint's own properties is
// refused, and nothing is recorded.
func TestCheckpointInfoKeyReserved(t *testing.T) {
	ctx := context.Background()
	cat, w := openWriter(t, t.TempDir())
	err := w.Flush(ctx, pipeline.Checkpoint{Pos: 5, Resume: "6", Info: map[string]string{"resume": "0"}})
	if err == nil {
		t.Fatal("Flush with Info key \"resume\" succeeded")
	}
	if fault.ClassOf(err) == fault.Transient {
		t.Errorf("a reserved Info key is a transient error: %v", err)
	}
	if _, ok, _ := bronze.LoadCheckpoint(ctx, cat, "src"); ok {
		t.Fatal("a refused checkpoint was recorded")
	}
}
