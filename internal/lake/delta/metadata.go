package delta

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"
)

// commitMetadata commits a new metaData (and protocol, if it changes),
// built by build from the latest state: on a lost race it is rebuilt from
// the state after the winners, so concurrent appends and metadata changes
// are not lost. The commit's userMetadata carries the previous commit's
// forward (merged with props): the latest commit's userMetadata stays the
// table's cursor.
func (t *Table) commitMetadata(ctx context.Context, op string, props map[string]string,
	build func(st *state) (*Metadata, *Protocol, error)) error {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		meta, proto, err := build(t.st)
		if err != nil {
			return err
		}
		if meta == nil {
			return nil // nothing to change
		}
		v := t.st.version + 1
		user := map[string]string{}
		if ci, err := commitInfo(t.dir, v-1); err == nil {
			maps.Copy(user, userProps(ci))
		}
		maps.Copy(user, props)
		ci := map[string]any{
			"timestamp":     nowMs(),
			"operation":     op,
			"readVersion":   v - 1,
			"isBlindAppend": false,
			"engineInfo":    engineInfo,
			"txnId":         uuid.NewString(),
		}
		if len(user) > 0 {
			ci["userMetadata"] = mustJSON(user)
		}
		acts := []action{{CommitInfo: ci}}
		if proto != nil {
			acts = append(acts, action{Protocol: proto})
		}
		acts = append(acts, action{MetaData: meta})
		data, err := encodeCommit(acts)
		if err != nil {
			return err
		}
		err = putIfAbsent(t.dir, v, data)
		var unsynced *unsyncedError
		if err == nil || errors.As(err, &unsynced) {
			st := *t.st
			st.apply(v, acts)
			if err := t.setState(&st); err != nil {
				return err
			}
			if unsynced != nil {
				return fmt.Errorf("Delta table %s: %s: %w", t.dir, op, unsynced)
			}
			return t.maybeCheckpoint(v)
		}
		if !errors.Is(err, errVersionTaken) {
			return fmt.Errorf("Delta table %s: %s: %w", t.dir, op, err)
		}
		if attempt == maxCommitAttempts {
			return fmt.Errorf("Delta table %s: %s: version %d taken after %d attempts: %w", t.dir, op, v, attempt, ErrCommitConflict)
		}
		st, err := loadState(ctx, t.dir)
		if err != nil {
			return fmt.Errorf("Delta table %s: %s: %w", t.dir, op, err)
		}
		if err := t.setState(st); err != nil {
			return err
		}
	}
}

// SetProperties sets table properties (metaData.configuration) in one
// commit. delta.* keys are limited to the ones this writer honours, and
// tidemark.day-partition cannot change.
func (t *Table) SetProperties(ctx context.Context, props map[string]string) error {
	for k := range props {
		if strings.HasPrefix(k, "delta.") && !allowedDeltaProps[k] {
			return fmt.Errorf("Delta table %s: property %s: %w (not yet supported)", t.dir, k, ErrUnsupported)
		}
		if k == PropDayPartition {
			return fmt.Errorf("Delta table %s: property %s cannot change", t.dir, k)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := checkWritable(t.st.protocol, t.st.meta); err != nil {
		return fmt.Errorf("Delta table %s: %w", t.dir, err)
	}
	return t.commitMetadata(ctx, "SET TBLPROPERTIES", nil, func(st *state) (*Metadata, *Protocol, error) {
		conf := maps.Clone(map[string]string(st.meta.Configuration))
		if conf == nil {
			conf = map[string]string{}
		}
		changed := false
		for k, v := range props {
			if old, ok := conf[k]; !ok || old != v {
				conf[k], changed = v, true
			}
		}
		if !changed {
			return nil, nil, nil
		}
		m := *st.meta
		m.Configuration = conf
		feat, err := featuresOf(m.SchemaString)
		if err != nil {
			return nil, nil, err
		}
		return &m, upgrade(st.protocol, protocolFor(feat, conf)), nil
	})
}

// AddColumns appends columns to the table's schema (before the partition
// column, which stays last) in one commit; they are nullable whatever the
// fields say, and read as null in the files written before. A name the
// table has already is an error wrapping lake.ErrIncompatibleType unless
// it has the same type (a retry). Commit props are merged into the
// carried-forward userMetadata.
func (t *Table) AddColumns(ctx context.Context, cols []arrow.Field, props map[string]string) error {
	return t.evolve(ctx, nil, cols, props, nil)
}

// featuresOf returns the features a schema string's types need.
func featuresOf(schemaString string) (schemaFeatures, error) {
	_, feat, err := fromDeltaSchema(schemaString)
	return feat, err
}

// upgrade returns the protocol a table of protocol cur needs to support
// want as well, or nil when cur suffices.
func upgrade(cur *Protocol, want Protocol) *Protocol {
	if cur.MinReaderVersion < 3 && want.MinReaderVersion < 3 && cur.MinWriterVersion < 7 && want.MinWriterVersion < 7 {
		if want.MinWriterVersion <= cur.MinWriterVersion {
			return nil
		}
		return &Protocol{MinReaderVersion: max(cur.MinReaderVersion, want.MinReaderVersion), MinWriterVersion: want.MinWriterVersion}
	}
	// Table features: the legacy versions' features become listed ones.
	p := Protocol{MinReaderVersion: 3, MinWriterVersion: 7}
	rf := slices.Clone(cur.ReaderFeatures)
	wf := slices.Clone(cur.WriterFeatures)
	if cur.MinWriterVersion < 7 {
		// Writer versions 2 and 4 imply these (PROTOCOL.md, "Writer Version
		// Requirements"); this writer honours them (protocol.go).
		if cur.MinWriterVersion >= 2 {
			wf = append(wf, "appendOnly", "invariants")
		}
		if cur.MinWriterVersion >= 3 {
			wf = append(wf, "checkConstraints")
		}
		if cur.MinWriterVersion >= 4 {
			wf = append(wf, "changeDataFeed", "generatedColumns")
		}
	}
	rf = append(rf, want.ReaderFeatures...)
	wf = append(wf, want.WriterFeatures...)
	slices.Sort(rf)
	slices.Sort(wf)
	p.ReaderFeatures = slices.Compact(rf)
	p.WriterFeatures = slices.Compact(wf)
	crf, cwf := slices.Clone(cur.ReaderFeatures), slices.Clone(cur.WriterFeatures)
	slices.Sort(crf)
	slices.Sort(cwf)
	if slices.Equal(p.ReaderFeatures, crf) && slices.Equal(p.WriterFeatures, cwf) &&
		cur.MinReaderVersion == 3 && cur.MinWriterVersion == 7 {
		return nil
	}
	return &p
}
