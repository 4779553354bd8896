package bronze

import (
	"encoding/json"
	"strings"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// Metadata column names (ARCHITECTURE §2).
const (
	ColOp          = "cdc_op"
	ColTS          = "cdc_ts"
	ColProcessedAt = "cdc_processed_at"
	ColLSN         = "cdc_source_lsn"
	ColTxID        = "cdc_source_tx_id"
	ColSeq         = "cdc_seq"
	ColUnchanged   = "cdc_unchanged"
)

// Summary property keys.
const (
	PropCursor    = "tidemark.cursor"
	PropPosition  = "tidemark.position"
	PropWatermark = "tidemark.watermark"
	PropSlot      = "tidemark.slot"
	PropUpdatedAt = "tidemark.updated-at"
	// Checkpoint properties of the namespace bronze.<source> (checkpoint.go).
	PropCommitLSN = "tidemark.commit-lsn" // Checkpoint.Pos: the commit position (PostgreSQL: commit LSN)
	PropResume    = "tidemark.resume"     // Checkpoint.Resume: the source's opaque resume token
	// PropAckedLSN is where lakes written before tidemark.resume keep a
	// PostgreSQL checkpoint's resume position (now also its Info
	// "acked-lsn", stored under the same key).
	PropAckedLSN = "tidemark.acked-lsn"
	// PropKey is a table property: the source table's key columns (JSON
	// list). A table captured with no key to merge by records [] (bronze
	// only, no silver table: Keyless); an absent property is a table
	// written before tidemark recorded keys. A key change also records it
	// in the summary of its marker commit and every later one
	// (pipeline.PropKey, rekey.go).
	PropKey = pipeline.PropKey
)

// keyProperty is the PropKey value of key ([] for none).
func keyProperty(key []string) string {
	if len(key) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(key)
	return string(b)
}

// RecordedKey is the key (PropKey's JSON list) a bronze table's rows are
// keyed by from its latest commit on, given that commit's summary and the
// table's properties: the summary's after a key change (rekey.go), else
// the property; "" when the table records none.
func RecordedKey(summary, props map[string]string) string {
	if k := summary[PropKey]; k != "" {
		return k
	}
	return props[PropKey]
}

// Keyless reports whether a bronze table records a source table with no
// key (RecordedKey = []): it is captured into bronze only.
func Keyless(summary, props map[string]string) bool {
	return strings.TrimSpace(RecordedKey(summary, props)) == "[]"
}

// idAssigner hands out field ids, including those of list elements.
type idAssigner struct{ next int }

func (a *idAssigner) field(name string, t iceberg.Type) iceberg.NestedField {
	id := a.next
	a.next++
	return iceberg.NestedField{ID: id, Name: name, Type: a.typ(t), Required: false}
}

func (a *idAssigner) typ(t iceberg.Type) iceberg.Type {
	switch lt := t.(type) {
	case *iceberg.ListType:
		id := a.next
		a.next++
		return &iceberg.ListType{ElementID: id, Element: a.typ(lt.Element), ElementRequired: false}
	}
	return t
}

func metadataFields(a *idAssigner) []iceberg.NestedField {
	return []iceberg.NestedField{
		a.field(ColOp, iceberg.PrimitiveTypes.String),
		a.field(ColTS, iceberg.PrimitiveTypes.TimestampTz),
		a.field(ColProcessedAt, iceberg.PrimitiveTypes.TimestampTz),
		a.field(ColLSN, iceberg.PrimitiveTypes.Int64),
		a.field(ColTxID, iceberg.PrimitiveTypes.Int64),
		a.field(ColSeq, iceberg.PrimitiveTypes.Int64),
		a.field(ColUnchanged, &iceberg.ListType{Element: iceberg.PrimitiveTypes.String}),
	}
}

// tableSchema is the bronze schema of a source table.
func tableSchema(s *change.Schema) *iceberg.Schema {
	a := &idAssigner{next: 1}
	var fields []iceberg.NestedField
	for _, f := range s.Fields {
		fields = append(fields, a.field(f.Name, f.Type))
	}
	fields = append(fields, metadataFields(a)...)
	return iceberg.NewSchema(0, fields...)
}

// Dead-letter and message table columns.
const (
	ColTable         = "source_table"
	ColError         = "error"
	ColRaw           = "raw"
	ColPrefix        = "prefix"
	ColContent       = "content"
	ColContentText   = "content_text"
	ColTransactional = "transactional"
)

func deadLetterSchema() *iceberg.Schema {
	a := &idAssigner{next: 1}
	return iceberg.NewSchema(0,
		a.field(ColTable, iceberg.PrimitiveTypes.String),
		a.field(ColOp, iceberg.PrimitiveTypes.String),
		a.field(ColError, iceberg.PrimitiveTypes.String),
		a.field(ColRaw, iceberg.PrimitiveTypes.String),
		a.field(ColTS, iceberg.PrimitiveTypes.TimestampTz),
		a.field(ColProcessedAt, iceberg.PrimitiveTypes.TimestampTz),
		a.field(ColLSN, iceberg.PrimitiveTypes.Int64),
		a.field(ColTxID, iceberg.PrimitiveTypes.Int64),
		a.field(ColSeq, iceberg.PrimitiveTypes.Int64),
	)
}

func messagesSchema() *iceberg.Schema {
	a := &idAssigner{next: 1}
	return iceberg.NewSchema(0,
		a.field(ColPrefix, iceberg.PrimitiveTypes.String),
		a.field(ColContent, iceberg.PrimitiveTypes.Binary),
		a.field(ColContentText, iceberg.PrimitiveTypes.String),
		a.field(ColTransactional, iceberg.PrimitiveTypes.Bool),
		a.field(ColTS, iceberg.PrimitiveTypes.TimestampTz),
		a.field(ColProcessedAt, iceberg.PrimitiveTypes.TimestampTz),
		a.field(ColLSN, iceberg.PrimitiveTypes.Int64),
		a.field(ColTxID, iceberg.PrimitiveTypes.Int64),
		a.field(ColSeq, iceberg.PrimitiveTypes.Int64),
	)
}
