package delta

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The actions of the Delta log (PROTOCOL.md, "Actions"). One line of a
// commit file holds exactly one of them; a checkpoint row holds one in its
// column of the same name.
type action struct {
	Txn        *Txn            `json:"txn,omitempty"`
	Add        *Add            `json:"add,omitempty"`
	Remove     *Remove         `json:"remove,omitempty"`
	MetaData   *Metadata       `json:"metaData,omitempty"`
	Protocol   *Protocol       `json:"protocol,omitempty"`
	CommitInfo map[string]any  `json:"commitInfo,omitempty"`
	CDC        json.RawMessage `json:"cdc,omitempty"`
	// Actions of features tidemark does not support; a table using them is
	// refused by the protocol check, so they are only recognized here.
	DomainMetadata json.RawMessage `json:"domainMetadata,omitempty"`
}

// Protocol is the protocol action: the reader and writer versions (and,
// from versions 3 and 7, the table features) a client must support.
type Protocol struct {
	MinReaderVersion int      `json:"minReaderVersion"`
	MinWriterVersion int      `json:"minWriterVersion"`
	ReaderFeatures   []string `json:"readerFeatures,omitempty"`
	WriterFeatures   []string `json:"writerFeatures,omitempty"`
}

// Format is the data files' format of a metaData action (always parquet).
type Format struct {
	Provider string  `json:"provider"`
	Options  nullMap `json:"options"`
}

// Metadata is the metaData action: the table's id, schema, partition
// columns and configuration (its properties).
type Metadata struct {
	ID               string   `json:"id"`
	Name             *string  `json:"name,omitempty"`
	Description      *string  `json:"description,omitempty"`
	Format           Format   `json:"format"`
	SchemaString     string   `json:"schemaString"`
	PartitionColumns []string `json:"partitionColumns"`
	Configuration    nullMap  `json:"configuration"`
	CreatedTime      *int64   `json:"createdTime,omitempty"`
}

// Add is the add action: a data file that is part of the table from its
// commit on.
type Add struct {
	// Path is relative to the table's directory, URL-encoded (RFC 2396).
	Path string `json:"path"`
	// PartitionValues are serialized as the protocol says; nil is null.
	PartitionValues  valueMap        `json:"partitionValues"`
	Size             int64           `json:"size"`
	ModificationTime int64           `json:"modificationTime"`
	DataChange       bool            `json:"dataChange"`
	Stats            string          `json:"stats,omitempty"`
	Tags             nullMap         `json:"tags,omitempty"`
	DeletionVector   json.RawMessage `json:"deletionVector,omitempty"`
	BaseRowID        *int64          `json:"baseRowId,omitempty"`
	DefaultRowCommit *int64          `json:"defaultRowCommitVersion,omitempty"`
}

// Remove is the remove action: a data file no longer part of the table
// (a tombstone until vacuum).
type Remove struct {
	Path                 string          `json:"path"`
	DeletionTimestamp    *int64          `json:"deletionTimestamp,omitempty"`
	DataChange           bool            `json:"dataChange"`
	ExtendedFileMetadata bool            `json:"extendedFileMetadata,omitempty"`
	PartitionValues      valueMap        `json:"partitionValues,omitempty"`
	Size                 *int64          `json:"size,omitempty"`
	DeletionVector       json.RawMessage `json:"deletionVector,omitempty"`
}

// Txn is the txn action (a transaction identifier): the last version an
// application committed to the table, committed atomically with its data.
type Txn struct {
	AppID       string `json:"appId"`
	Version     int64  `json:"version"`
	LastUpdated *int64 `json:"lastUpdated,omitempty"`
}

// valueMap is a map of strings whose values may be null (partition values).
// It reads both a JSON object and the list of {"key","value"} objects a
// Parquet map becomes in JSON (checkpoints).
type valueMap map[string]*string

func (m *valueMap) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*m = nil
		return nil
	}
	out := map[string]*string{}
	if len(b) > 0 && b[0] == '[' {
		var kvs []struct {
			Key   string  `json:"key"`
			Value *string `json:"value"`
		}
		if err := json.Unmarshal(b, &kvs); err != nil {
			return err
		}
		for _, kv := range kvs {
			out[kv.Key] = kv.Value
		}
	} else if err := json.Unmarshal(b, &out); err != nil {
		return err
	}
	*m = out
	return nil
}

// nullMap is a map of strings (configuration, options, tags) read like
// valueMap; a null value reads as "".
type nullMap map[string]string

func (m *nullMap) UnmarshalJSON(b []byte) error {
	var v valueMap
	if err := v.UnmarshalJSON(b); err != nil {
		return err
	}
	if v == nil {
		*m = nil
		return nil
	}
	out := make(map[string]string, len(v))
	for k, s := range v {
		if s != nil {
			out[k] = *s
		}
	}
	*m = out
	return nil
}

func (m nullMap) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(map[string]string(m))
}

// parseCommit parses a commit file: newline-delimited JSON, one action a
// line.
func parseCommit(data []byte) ([]action, error) {
	var acts []action
	for n, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var a action
		if err := json.Unmarshal(line, &a); err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		acts = append(acts, a)
	}
	return acts, nil
}

// encodeCommit encodes actions as a commit file.
func encodeCommit(acts []action) ([]byte, error) {
	var b bytes.Buffer
	for _, a := range acts {
		line, err := json.Marshal(a)
		if err != nil {
			return nil, err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}
