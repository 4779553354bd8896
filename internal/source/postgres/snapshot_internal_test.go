package postgres

import (
	"reflect"
	"testing"
)

func TestSnapshotXip(t *testing.T) {
	for in, want := range map[string][]uint64{
		"100:105:":                         nil,
		"100:105:101,103":                  {101, 103},
		"4294967396:4294967400:4294967397": {4294967397},
	} {
		if got := snapshotXip(in); !reflect.DeepEqual(got, want) {
			t.Errorf("snapshotXip(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestCommittedBefore(t *testing.T) {
	ws := newWindows()
	ws.committed(7, 100)
	if !ws.committedBefore(7, 101) || ws.committedBefore(7, 100) || ws.committedBefore(8, 1000) {
		t.Error("committedBefore does not follow the recorded commits")
	}
	for i := uint32(0); i < recentTxns+10; i++ {
		ws.committed(1000+i, uint64(i))
	}
	if len(ws.recent) > recentTxns || ws.committedBefore(7, 101) {
		t.Errorf("recent commits are not bounded: %d", len(ws.recent))
	}
}
