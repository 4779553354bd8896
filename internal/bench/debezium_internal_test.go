package bench

import (
	"errors"
	"strings"
	"testing"
)

// The Debezium peer itself is only run by `tidemark-bench --debezium`
// (it needs Java, Maven and the network once): these tests cover what the
// harness reads from it and writes for it.

func TestParseDebeziumCount(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    debeziumCount
		wantErr string
	}{
		{
			name: "count after Debezium's log",
			out: `[main] INFO io.debezium.connector.postgresql.PostgresConnectorTask - Starting PostgresConnectorTask
[pool-1-thread-1] INFO io.debezium.embedded.async.AsyncEmbeddedEngine - Engine state has changed from 'POLLING_TASKS' to 'STOPPING'
tidemark-debezium: records=50001 changes=50000
`,
			want: debeziumCount{Records: 50001, Changes: 50000},
		},
		{
			name: "the last count wins",
			out:  "tidemark-debezium: records=1 changes=1\ntidemark-debezium: records=7 changes=5\n",
			want: debeziumCount{Records: 7, Changes: 5},
		},
		{
			name:    "engine failure",
			out:     "tidemark-debezium: engine failed: Unable to connect: Connection refused\n",
			wantErr: "engine failed: Unable to connect",
		},
		{
			name:    "failed close after a count",
			out:     "tidemark-debezium: records=3 changes=3\ntidemark-debezium: close: java.io.IOException: boom\n",
			wantErr: "close: java.io.IOException",
		},
		{
			name:    "killed before counting",
			out:     "[main] INFO io.debezium.embedded.async.AsyncEmbeddedEngine - Engine is starting\n",
			wantErr: errNoCount.Error(),
		},
		{
			name:    "more changes than records",
			out:     "tidemark-debezium: records=3 changes=4\n",
			wantErr: "malformed count line",
		},
		{
			name:    "not a number",
			out:     "tidemark-debezium: records=x changes=4\n",
			wantErr: "malformed count line",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDebeziumCount(tc.out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				if tc.wantErr == errNoCount.Error() && !errors.Is(err, errNoCount) {
					t.Fatalf("err = %v, want errNoCount", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestEscapeProperty(t *testing.T) {
	for in, want := range map[string]string{
		"plain":            "plain",
		"a=b:c#d!e":        "a=b:c#d!e",
		`C:\dir`:           `C:\\dir`,
		" lead":            `\ lead`,
		"in side":          "in side",
		"two\nlines\r":     `two\nlines\r`,
		"tab\there":        `tab\there`,
		"pässwörd":         `p\u00e4ssw\u00f6rd`,
		"emoji \U0001F600": `emoji \ud83d\ude00`,
	} {
		if got := escapeProperty(in); got != want {
			t.Errorf("escapeProperty(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDebeziumProperties checks the settings the issue fixes: pgoutput,
// its own slot and publication, file offsets flushed every second, and no
// snapshot (the WAL only).
func TestDebeziumProperties(t *testing.T) {
	props := debeziumConfig{
		Name: "debezium_tpcb_1", Host: "127.0.0.1", Port: 5433, User: "postgres", Password: `p=w\d`,
		DB: "cdc_tpcb", Slot: "dbz_tpcb_1", Publication: debeziumPublication, OffsetFile: "/tmp/x/offsets.dat",
	}.properties()
	got := map[string]string{}
	var keys []string
	for _, line := range strings.Split(strings.TrimSuffix(props, "\n"), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line without '=': %q", line)
		}
		got[k] = v
		keys = append(keys, k)
	}
	for k, want := range map[string]string{
		"connector.class":              "io.debezium.connector.postgresql.PostgresConnector",
		"plugin.name":                  "pgoutput",
		"slot.name":                    "dbz_tpcb_1",
		"publication.name":             debeziumPublication,
		"publication.autocreate.mode":  "disabled",
		"snapshot.mode":                "no_data",
		"offset.storage":               "org.apache.kafka.connect.storage.FileOffsetBackingStore",
		"offset.storage.file.filename": "/tmp/x/offsets.dat",
		"offset.flush.interval.ms":     "1000",
		"database.port":                "5433",
		"database.password":            `p=w\\d`,
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			t.Errorf("keys not sorted: %q before %q", keys[i-1], keys[i])
		}
	}
}
