package iceberg

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/tidemark/tidemark/internal/fault"
)

type sqliteErr int

func (e sqliteErr) Error() string { return fmt.Sprintf("sqlite error %d", int(e)) }
func (e sqliteErr) Code() int     { return int(e) }

func TestClassify(t *testing.T) {
	var syn error
	if err := json.Unmarshal([]byte(`{"format-version": 2, "tab`), &map[string]any{}); err != nil {
		syn = err
	}
	for _, tc := range []struct {
		name string
		err  error
		want fault.Class
	}{
		{"truncated metadata json", syn, fault.Fatal},
		{"missing metadata file", &fs.PathError{Op: "open", Path: "m.json", Err: syscall.ENOENT}, fault.Fatal},
		{"catalog not a database", sqliteErr(26), fault.Fatal},
		{"catalog malformed (extended code)", sqliteErr(11 | 1<<8), fault.Fatal},
		{"disk full", &fs.PathError{Op: "write", Path: "d.parquet", Err: syscall.ENOSPC}, fault.Transient},
		{"sqlite full", sqliteErr(13), fault.Transient},
		{"other", errors.New("connection refused by catalog"), fault.Unknown},
	} {
		got := fault.ClassOf(classify(fmt.Errorf("iceberg: load table a.b: %w", tc.err), "table a.b (metadata file m.json)"))
		if got != tc.want {
			t.Errorf("%s: class %v, want %v", tc.name, got, tc.want)
		}
	}
	err := classify(syn, "table a.b (metadata file m.json)")
	if !errors.Is(err, fault.ErrCorruptState) || !errors.As(err, new(*json.SyntaxError)) {
		t.Errorf("corrupt: %v does not match ErrCorruptState and keep its cause", err)
	}
}
