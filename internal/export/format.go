package export

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/tidemark/tidemark/internal/fault"
)

// The file formats.
const (
	FormatJSONL   = "jsonl"
	FormatParquet = "parquet"
	FormatCSV     = "csv"
)

// A format writes window files. The rows are bronze's: the source
// columns, then cdc_op, cdc_ts, cdc_source_lsn, cdc_seq, ... (docs/bronze.md).
type format interface {
	ext() string
	open(w io.Writer, sc *arrow.Schema) (fileWriter, error)
}

// fileWriter writes one file; write may be called many times, close once.
type fileWriter interface {
	// write writes rows [from, to) of rec.
	write(rec arrow.RecordBatch, from, to int) error
	close() error
}

func newFormat(name string) (format, error) {
	switch name {
	case FormatJSONL:
		return jsonl{}, nil
	case FormatParquet:
		return parquetFormat{}, nil
	case FormatCSV:
		return csvFormat{}, nil
	}
	return nil, fault.With(fault.ErrBadConfig, fmt.Sprintf("--format %q: want jsonl, parquet or csv", name), nil)
}

// jsonl: one JSON object per row, the columns in the table's order, values
// as `tidemark show --format json` prints them.
type jsonl struct{}

func (jsonl) ext() string { return ".jsonl" }

func (jsonl) open(w io.Writer, sc *arrow.Schema) (fileWriter, error) {
	keys := make([][]byte, sc.NumFields())
	for i, f := range sc.Fields() {
		k, _ := json.Marshal(f.Name)
		keys[i] = k
	}
	return &jsonlWriter{w: bufio.NewWriterSize(w, 1<<16), keys: keys}, nil
}

type jsonlWriter struct {
	w    *bufio.Writer
	keys [][]byte
}

func (j *jsonlWriter) write(rec arrow.RecordBatch, from, to int) error {
	for r := from; r < to; r++ {
		j.w.WriteByte('{')
		for c, col := range rec.Columns() {
			if c > 0 {
				j.w.WriteByte(',')
			}
			j.w.Write(j.keys[c])
			j.w.WriteByte(':')
			v, err := json.Marshal(col.GetOneForMarshal(r))
			if err != nil {
				return fmt.Errorf("column %s: %w", rec.ColumnName(c), err)
			}
			j.w.Write(v)
		}
		if err := j.w.WriteByte('}'); err != nil {
			return err
		}
		if err := j.w.WriteByte('\n'); err != nil {
			return err
		}
	}
	return nil
}

func (j *jsonlWriter) close() error { return j.w.Flush() }

// csvFormat: a header line of column names, then one line per row
// (RFC 4180). NULL is an empty field; an empty string is "" (quoted), as
// PostgreSQL's COPY ... CSV writes them. Lists and structs are JSON text.
type csvFormat struct{}

func (csvFormat) ext() string { return ".csv" }

func (csvFormat) open(w io.Writer, sc *arrow.Schema) (fileWriter, error) {
	bw := bufio.NewWriterSize(w, 1<<16)
	for i, f := range sc.Fields() {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString(csvQuote(f.Name, false))
	}
	bw.WriteString("\r\n")
	return &csvWriter{w: bw}, nil
}

type csvWriter struct{ w *bufio.Writer }

func (c *csvWriter) write(rec arrow.RecordBatch, from, to int) error {
	for r := from; r < to; r++ {
		for i, col := range rec.Columns() {
			if i > 0 {
				c.w.WriteByte(',')
			}
			if col.IsNull(r) {
				continue
			}
			var s string
			switch col.DataType().ID() {
			case arrow.LIST, arrow.LARGE_LIST, arrow.FIXED_SIZE_LIST, arrow.STRUCT, arrow.MAP:
				b, err := json.Marshal(col.GetOneForMarshal(r))
				if err != nil {
					return fmt.Errorf("column %s: %w", rec.ColumnName(i), err)
				}
				s = string(b)
			default:
				s = col.ValueStr(r)
			}
			c.w.WriteString(csvQuote(s, true))
		}
		if _, err := c.w.WriteString("\r\n"); err != nil {
			return err
		}
	}
	return nil
}

func (c *csvWriter) close() error { return c.w.Flush() }

// csvQuote quotes s when it must be (a comma, quote or line break), and an
// empty value when emptyQuoted (to tell it from NULL).
func csvQuote(s string, emptyQuoted bool) string {
	if (s == "" && emptyQuoted) || strings.ContainsAny(s, ",\"\r\n") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}

// parquetFormat: the rows in bronze's Arrow schema, zstd-compressed.
type parquetFormat struct{}

func (parquetFormat) ext() string { return ".parquet" }

func (parquetFormat) open(w io.Writer, sc *arrow.Schema) (fileWriter, error) {
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd), parquet.WithCreatedBy("tidemark export"))
	// The writer's Close would close w: the caller syncs and closes it.
	pw, err := pqarrow.NewFileWriter(sc, struct{ io.Writer }{w}, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return nil, err
	}
	return &parquetWriter{w: pw}, nil
}

type parquetWriter struct{ w *pqarrow.FileWriter }

func (p *parquetWriter) write(rec arrow.RecordBatch, from, to int) error {
	s := rec.NewSlice(int64(from), int64(to))
	defer s.Release()
	return p.w.WriteBuffered(s)
}

func (p *parquetWriter) close() error { return p.w.Close() }
