package delta

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// What this package supports of the protocol (docs/delta.md):
//
//   - reading: reader versions 1 and 3 with the reader feature
//     timestampNtz; column mapping (mode other than none), deletion
//     vectors, V2 checkpoints and the other reader features are refused
//     with ErrUnsupported rather than read wrongly;
//   - writing: writer versions 1 to 4, and 7 with the writer features
//     appendOnly, changeDataFeed, timestampNtz, invariants,
//     checkConstraints and generatedColumns — the last three only while
//     the table uses none (no delta.invariants or
//     delta.generationExpression column metadata, no delta.constraints.*
//     property), since the writer would not enforce them.

var (
	readableFeatures = []string{"timestampNtz", "deletionVectors", "typeWidening"}
	writableFeatures = []string{"appendOnly", "changeDataFeed", "timestampNtz", "deletionVectors", "typeWidening", "invariants", "checkConstraints", "generatedColumns"}
)

// checkReadable refuses a table this package would read wrongly.
func checkReadable(p *Protocol, m *Metadata) error {
	switch p.MinReaderVersion {
	case 1:
	case 2, 3:
		if mode := m.Configuration["delta.columnMapping.mode"]; mode != "" && mode != "none" {
			return fmt.Errorf("%w: column mapping (mode %s)", ErrUnsupported, mode)
		}
		if p.MinReaderVersion == 3 {
			for _, f := range p.ReaderFeatures {
				if !slices.Contains(readableFeatures, f) {
					return fmt.Errorf("%w: reader feature %s", ErrUnsupported, f)
				}
			}
		}
	default:
		return fmt.Errorf("%w: reader version %d", ErrUnsupported, p.MinReaderVersion)
	}
	return nil
}

// checkWritable refuses a table this package would write wrongly.
func checkWritable(p *Protocol, m *Metadata) error {
	switch {
	case p.MinWriterVersion >= 1 && p.MinWriterVersion <= 4:
	case p.MinWriterVersion == 7:
		for _, f := range p.WriterFeatures {
			if !slices.Contains(writableFeatures, f) {
				return fmt.Errorf("%w: writer feature %s", ErrUnsupported, f)
			}
		}
	default:
		return fmt.Errorf("%w: writer version %d (column mapping, identity columns)", ErrUnsupported, p.MinWriterVersion)
	}
	for k := range m.Configuration {
		if strings.HasPrefix(k, "delta.constraints.") {
			return fmt.Errorf("%w: CHECK constraint %s", ErrUnsupported, k)
		}
	}
	var st structType
	if err := json.Unmarshal([]byte(m.SchemaString), &st); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	var walk func(fields []structField) error
	walk = func(fields []structField) error {
		for _, f := range fields {
			for _, k := range []string{"delta.invariants", "delta.generationExpression", "delta.identity.start", "CURRENT_DEFAULT"} {
				if _, ok := f.Metadata[k]; ok {
					return fmt.Errorf("%w: column %s has %s", ErrUnsupported, f.Name, k)
				}
			}
			var nested structType
			if json.Unmarshal(f.Type, &nested) == nil && nested.Type == "struct" {
				if err := walk(nested.Fields); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(st.Fields)
}
