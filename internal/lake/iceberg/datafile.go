package iceberg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	iceberggo "github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
)

// maxStatsValue: a string or binary column holding a value longer than
// this in a data file is written without Parquet statistics. Parquet drops
// a min or max longer than this from the footer anyway (arrow-go's
// DefaultMaxStatsSize), but computes them first: arrow-go's statistics
// copy the largest value of each page several times over (SetMinMax,
// Merge, plainEncode), which was 6 copies of every 16 MiB value a bronze
// commit held, the largest share of its memory. Such a column keeps its
// value counts and sizes in the manifest; it loses only its null count and
// bounds, which a column of values this long had no use for.
const maxStatsValue = int(parquet.DefaultMaxStatsSize)

// dataFileWriter writes Arrow records as Parquet data files of one table
// and describes them for the manifest (table.DataFileFromMetadata, metrics
// from the file's footer), so that they can be added with
// Transaction.AddDataFiles. It writes what iceberg-go's own writer writes
// (one file per partition, the table's Parquet properties, field ids from
// the Arrow schema), with statistics off for columns of long values (see
// maxStatsValue), and row group by row group straight to the file instead
// of buffering a whole row group's pages.
type dataFileWriter struct {
	tbl     *table.Table
	sc      *arrow.Schema
	mem     memory.Allocator
	fs      icebergio.WriteFileIO
	locs    table.LocationProvider
	writeID uuid.UUID
	// partCol is the partition source column's index in sc and part the
	// partition field (day of a timestamp, or bucket: then bucket computes
	// it); partCol < 0: unpartitioned.
	partCol int
	part    iceberggo.PartitionField
	bucket  *Bucketer
}

// newDataFileWriter returns a writer for records of schema sc into tbl, or
// ok=false when tbl is not one it writes: a format version above 2 (whose
// added files need row lineage), a partition spec other than none, one
// day() of a top-level timestamp column or one bucket() of a column
// Bucketer maps, or records whose schema is not the table's current Arrow
// schema (current). The caller then uses iceberg-go's writer.
func newDataFileWriter(ctx context.Context, tbl *table.Table, current, sc *arrow.Schema) (w *dataFileWriter, ok bool, err error) {
	if tbl.Metadata().Version() > 2 || !sc.Equal(current) {
		return nil, false, nil
	}
	w = &dataFileWriter{tbl: tbl, sc: sc, mem: memory.DefaultAllocator, writeID: uuid.New(), partCol: -1}
	spec := tbl.Spec()
	if n := spec.NumFields(); n > 1 {
		return nil, false, nil
	} else if n == 1 {
		pf := spec.Field(0)
		if _, isBucket := pf.Transform.(iceberggo.BucketTransform); isBucket {
			b, ok := bucketerOf(tbl)
			if !ok {
				return nil, false, nil
			}
			idx := sc.FieldIndices(b.Col)
			if len(idx) != 1 {
				return nil, false, nil
			}
			w.partCol, w.part, w.bucket = idx[0], pf, b
		} else if _, day := pf.Transform.(iceberggo.DayTransform); !day {
			return nil, false, nil
		}
		src, found := tbl.Schema().FindFieldByID(pf.SourceID())
		if !found {
			return nil, false, nil
		}
		idx := sc.FieldIndices(src.Name)
		if len(idx) != 1 {
			return nil, false, nil
		}
		if w.bucket == nil {
			if tt, isTS := sc.Field(idx[0]).Type.(*arrow.TimestampType); !isTS || tt.Unit != arrow.Microsecond {
				return nil, false, nil
			}
			w.partCol, w.part = idx[0], pf
		}
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, false, err
	}
	wfs, isW := fs.(icebergio.WriteFileIO)
	if !isW {
		return nil, false, errors.New("the table's file system cannot write")
	}
	w.fs = wfs
	if w.locs, err = tbl.LocationProvider(); err != nil {
		return nil, false, err
	}
	return w, true, nil
}

// dayGroup is the rows of one partition: day is the partition value, a
// day or a bucket (nil: rows whose source value is null).
type dayGroup struct {
	day  *int32
	recs []arrow.RecordBatch
}

// partOf returns the partition value of row i of col, the partition's
// source column (nullDay for a null).
func (w *dataFileWriter) partOf(col arrow.Array, i int) int64 {
	if w.bucket != nil {
		b, ok := w.bucket.Of(col, i)
		if !ok {
			return nullDay
		}
		return int64(b)
	}
	return dayOf(col.(*array.Timestamp), i)
}

const microsPerDay = 86_400_000_000

// write writes recs as one data file per partition and returns them. Files
// of a failed call are left for orphan-file cleanup, like those of a
// failed commit.
func (w *dataFileWriter) write(ctx context.Context, recs []arrow.RecordBatch) ([]iceberggo.DataFile, error) {
	groups, err := w.partition(ctx, recs)
	defer func() {
		for _, g := range groups {
			for _, r := range g.recs {
				r.Release()
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	var files []iceberggo.DataFile
	for n, g := range groups {
		props, err := w.writerProperties(g.recs)
		if err != nil {
			return nil, err
		}
		df, err := w.writeFile(n, g, props)
		if err != nil {
			return nil, err
		}
		files = append(files, df)
	}
	return files, nil
}

// partition splits recs by partition, in order of day (nulls last). A
// record all of whose rows fall on one day (the usual case: a commit's
// rows were captured within moments) is used as it is, not copied.
func (w *dataFileWriter) partition(ctx context.Context, recs []arrow.RecordBatch) ([]*dayGroup, error) {
	var groups []*dayGroup
	find := func(day *int32) *dayGroup {
		for _, g := range groups {
			if (g.day == nil) == (day == nil) && (day == nil || *g.day == *day) {
				return g
			}
		}
		g := &dayGroup{day: day}
		groups = append(groups, g)
		return g
	}
	for _, rec := range recs {
		if rec.NumRows() == 0 {
			continue
		}
		if w.partCol < 0 {
			rec.Retain()
			g := find(nil)
			g.recs = append(g.recs, rec)
			continue
		}
		col := rec.Column(w.partCol)
		first, uniform := w.partOf(col, 0), true
		for i := 1; i < col.Len() && uniform; i++ {
			uniform = w.partOf(col, i) == first
		}
		if uniform {
			rec.Retain()
			g := find(dayPtr(first))
			g.recs = append(g.recs, rec)
			continue
		}
		rows := map[int64][]int64{}
		for i := range col.Len() {
			d := w.partOf(col, i)
			rows[d] = append(rows[d], int64(i))
		}
		for d, idx := range rows {
			ib := array.NewInt64Builder(w.mem)
			ib.AppendValues(idx, nil)
			ia := ib.NewArray()
			ib.Release()
			part, err := Take(ctx, w.mem, rec, ia)
			ia.Release()
			if err != nil {
				return groups, fmt.Errorf("split rows by partition: %w", err)
			}
			g := find(dayPtr(d))
			g.recs = append(g.recs, part)
		}
	}
	slices.SortStableFunc(groups, func(a, b *dayGroup) int {
		switch {
		case a.day == nil && b.day == nil:
			return 0
		case a.day == nil:
			return 1
		case b.day == nil:
			return -1
		}
		return cmp.Compare(*a.day, *b.day)
	})
	return groups, nil
}

// nullDay stands for a null timestamp in dayOf.
const nullDay = math.MinInt64

// dayOf is the day (since 1970-01-01) of row i's timestamp, or nullDay.
func dayOf(col *array.Timestamp, i int) int64 {
	if col.IsNull(i) {
		return nullDay
	}
	us := int64(col.Value(i))
	d := us / microsPerDay
	if us%microsPerDay < 0 {
		d--
	}
	return d
}

func dayPtr(d int64) *int32 {
	if d == nullDay {
		return nil
	}
	v := int32(d)
	return &v
}

// writeFile writes one partition's rows as one data file.
func (w *dataFileWriter) writeFile(n int, g *dayGroup, props *parquet.WriterProperties) (iceberggo.DataFile, error) {
	out, err := w.create(n, g.day, props)
	if err != nil {
		return nil, err
	}
	for _, rec := range g.recs {
		// Write, not WriteBuffered: each record is a row group whose pages
		// go to the file column by column, not held until the row group
		// ends.
		if err = out.pw.Write(rec); err != nil {
			break
		}
	}
	return w.finish(out, err)
}

// openFile is a data file being written: create opens it, finish closes it.
type openFile struct {
	path   string
	values map[int]any // partition values
	f      io.Closer
	cw     *countingWriter
	pw     *pqarrow.FileWriter
}

// create opens data file n of this write, of partition day (see dayGroup).
func (w *dataFileWriter) create(n int, day *int32, props *parquet.WriterProperties) (*openFile, error) {
	name := fmt.Sprintf("%05d-0-%s.parquet", n, w.writeID)
	var values map[int]any
	if w.partCol >= 0 {
		human := "null"
		var value any
		switch {
		case day == nil:
		case w.bucket != nil:
			human = w.part.Transform.ToHumanStrType(iceberggo.PrimitiveTypes.Int32, *day)
			value = *day
		default:
			human = w.part.Transform.ToHumanStrType(iceberggo.PrimitiveTypes.Date, iceberggo.Date(*day))
			value = iceberggo.Date(*day)
		}
		name = w.part.EscapedName() + "=" + url.QueryEscape(human) + "/" + name
		values = map[int]any{w.part.FieldID: value}
	}
	path := w.locs.NewDataLocation(name)
	f, err := w.fs.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create data file %s: %w", path, err)
	}
	cw := &countingWriter{w: f}
	pw, err := pqarrow.NewFileWriter(w.sc, cw, props,
		pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(w.mem), pqarrow.WithStoreSchema()))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write data file %s: %w", path, err)
	}
	return &openFile{path: path, values: values, f: f, cw: cw, pw: pw}, nil
}

// finish closes out and describes it for the manifest; err is the error
// of writing it, if any (then out is closed and err returned).
func (w *dataFileWriter) finish(out *openFile, err error) (iceberggo.DataFile, error) {
	path := out.path
	if cerr := out.pw.Close(); err == nil {
		err = cerr
	}
	if cerr := out.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write data file %s: %w", path, err)
	}
	meta, err := out.pw.FileMetadata()
	if err != nil {
		return nil, fmt.Errorf("data file %s: footer: %w", path, err)
	}
	df, err := table.DataFileFromMetadata(table.DataFileArgs{
		Schema:          w.tbl.Schema(),
		Spec:            w.tbl.Spec(),
		Format:          iceberggo.ParquetFile,
		Metadata:        meta,
		FilePath:        path,
		FileSize:        out.cw.n,
		Content:         iceberggo.EntryContentData,
		PartitionValues: out.values,
		SortOrderID:     w.tbl.SortOrder().OrderID(),
		Properties:      w.tbl.Properties(),
		FormatVersion:   w.tbl.Metadata().Version(),
	})
	if err != nil {
		return nil, fmt.Errorf("data file %s: metrics: %w", path, err)
	}
	return df, nil
}

// writerProperties are the table's Parquet write properties, as iceberg-go
// reads them (write.parquet.*, parquet.enable.dictionary), with statistics
// off for each string or binary column holding a value longer than
// maxStatsValue in recs.
func (w *dataFileWriter) writerProperties(recs []arrow.RecordBatch) (*parquet.WriterProperties, error) {
	return w.propertiesFor(longestValues(recs))
}

// propertiesFor is writerProperties for a file whose longest value of each
// top-level column j is longestOf[j].
func (w *dataFileWriter) propertiesFor(longestOf []int) (*parquet.WriterProperties, error) {
	p := w.tbl.Properties()
	opts := []parquet.WriterProperty{
		parquet.WithMaxRowGroupLength(int64(p.GetInt(table.ParquetRowGroupLimitKey, table.ParquetRowGroupLimitDefault))),
		parquet.WithDataPageSize(int64(p.GetInt(table.ParquetPageSizeBytesKey, table.ParquetPageSizeBytesDefault))),
		parquet.WithBatchSize(int64(p.GetInt(table.ParquetPageRowLimitKey, table.ParquetPageRowLimitDefault))),
		parquet.WithDictionaryPageSizeLimit(int64(p.GetInt(table.ParquetDictSizeBytesKey, table.ParquetDictSizeBytesDefault))),
		parquet.WithMaxBloomFilterBytes(int64(p.GetInt(table.ParquetBloomFilterMaxBytesKey, table.ParquetBloomFilterMaxBytesDefault))),
	}
	if p.Get(table.ParquetPageVersionKey, table.ParquetPageVersionDefault) == "1" {
		opts = append(opts, parquet.WithDataPageVersion(parquet.DataPageV1))
	} else {
		opts = append(opts, parquet.WithDataPageVersion(parquet.DataPageV2))
	}
	codec := compressionCodec(p.Get(table.ParquetCompressionKey, table.ParquetCompressionDefault))
	opts = append(opts, parquet.WithCompression(codec),
		parquet.WithCompressionLevel(p.GetInt(table.ParquetCompressionLevelKey, table.ParquetCompressionLevelDefault)))
	dict := true
	if v, set := p["parquet.enable.dictionary"]; set {
		dict = strings.EqualFold(v, "true")
	}
	opts = append(opts, parquet.WithDictionaryDefault(dict))
	for k, v := range p {
		if col, ok := strings.CutPrefix(k, "write.parquet.dict-encoding-enabled.column."); ok && col != "" {
			opts = append(opts, parquet.WithDictionaryFor(col, strings.EqualFold(v, "true")))
		}
		if col, ok := strings.CutPrefix(k, table.ParquetBloomFilterColumnEnabledKeyPrefix+"."); ok && col != "" {
			opts = append(opts, parquet.WithBloomFilterEnabledFor(col, strings.EqualFold(v, "true")))
		}
	}
	// As iceberg-go (and Iceberg's Java writer): a column whose dictionary
	// costs more than it saves falls back to plain encoding.
	pq, err := pqarrow.ToParquet(w.sc, parquet.NewWriterProperties(opts...), pqarrow.DefaultWriterProps())
	if err != nil {
		return nil, err
	}
	for i := range pq.NumColumns() {
		opts = append(opts, parquet.WithDictionaryCostFallbackFor(pq.Column(i).Path(), true))
	}
	// A keyed table's integer key column is what every merge scans
	// (ScanLiveKeys decodes it in each file a touched key may be in): it is
	// written plain and uncompressed, so a scan reads it without inflating
	// it (a 10M-row merge: 508 -> 472 ms). Keys are unique in a file, so a
	// dictionary never pays for it either.
	for _, id := range w.tbl.Schema().IdentifierFieldIDs {
		if f, ok := w.tbl.Schema().FindFieldByID(id); ok && plainKey(f.Type) {
			opts = append(opts, parquet.WithCompressionFor(f.Name, compress.Codecs.Uncompressed), parquet.WithDictionaryFor(f.Name, false))
		}
	}
	dictLimit := w.dictLimit()
	for j, f := range w.sc.Fields() {
		longest := 0
		if j < len(longestOf) {
			longest = longestOf[j]
		}
		if longest > maxStatsValue {
			opts = append(opts, parquet.WithStatsFor(f.Name, false))
		}
		// A value longer than a dictionary page makes the column fall back
		// to plain encoding, after the dictionary encoder has copied it
		// into its memo table and out again as a dictionary page.
		if longest > dictLimit {
			opts = append(opts, parquet.WithDictionaryFor(f.Name, false))
		}
		// A page is compressed into a buffer of its own before it is
		// written: one more copy of the value in flight. A column with a
		// value over uncompressedValue is written uncompressed.
		if longest > uncompressedValue {
			opts = append(opts, parquet.WithCompressionFor(f.Name, compress.Codecs.Uncompressed))
		}
	}
	return parquet.NewWriterProperties(opts...), nil
}

func (w *dataFileWriter) dictLimit() int {
	return w.tbl.Properties().GetInt(table.ParquetDictSizeBytesKey, table.ParquetDictSizeBytesDefault)
}

// valueClass is how many of the value lengths that change a column's write
// properties (propertiesFor) a value of length n exceeds: a file written
// with the properties for longest values of class c holds any value of a
// class up to c as it should.
func (w *dataFileWriter) valueClass(n int) int {
	c := 0
	for _, limit := range []int{maxStatsValue, w.dictLimit(), uncompressedValue} {
		if n > limit {
			c++
		}
	}
	return c
}

// uncompressedValue: a string or binary column holding a value longer than
// this in a data file is written uncompressed (writerProperties). Such a
// page is over what iceberg-go's readers accept anyway (64 MiB: see
// bigpages.go); compressing it would hold the value in flight once more,
// and a text value that large is mostly incompressible (documents,
// images, base64) or compressed by its writer already.
const uncompressedValue = int(parquet.DefaultMaxCompressedPageSize)

// plainKey reports whether a key column of type t is written uncompressed
// (writerProperties): the integer keys ScanLiveKeys decodes from pages.
func plainKey(t iceberggo.Type) bool {
	switch t.(type) {
	case iceberggo.Int32Type, iceberggo.Int64Type:
		return true
	}
	return false
}

// longestValues returns longestValue of each top-level column of recs.
func longestValues(recs []arrow.RecordBatch) []int {
	if len(recs) == 0 {
		return nil
	}
	out := make([]int, recs[0].NumCols())
	for j := range out {
		out[j] = longestValue(recs, j)
	}
	return out
}

// longestValue returns the length of the longest value of top-level
// column j of recs, if of strings or binaries (0 otherwise).
func longestValue(recs []arrow.RecordBatch, j int) int {
	longest := 0
	for _, rec := range recs {
		var offs []int32
		switch c := rec.Column(j).(type) {
		case *array.String:
			if len(c.ValueBytes()) <= longest {
				continue
			}
			offs = c.ValueOffsets()
		case *array.Binary:
			if len(c.ValueBytes()) <= longest {
				continue
			}
			offs = c.ValueOffsets()
		default:
			return 0
		}
		for i := 1; i < len(offs); i++ {
			longest = max(longest, int(offs[i]-offs[i-1]))
		}
	}
	return longest
}

func compressionCodec(name string) compress.Compression {
	switch name {
	case "zstd":
		return compress.Codecs.Zstd
	case "snappy":
		return compress.Codecs.Snappy
	case "gzip":
		return compress.Codecs.Gzip
	case "brotli":
		return compress.Codecs.Brotli
	case "lz4":
		return compress.Codecs.Lz4
	case "lz4raw":
		return compress.Codecs.Lz4Raw
	case "lzo":
		return compress.Codecs.Lzo
	}
	// iceberg-go writes an unknown codec uncompressed, too.
	return compress.Codecs.Uncompressed
}

// countingWriter counts the bytes written through it: the file's size.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// withSchema returns recs as batches of schema current when their columns
// are current's, by name, type and nullability, in order (a silver merge
// builds its batches without the field-id metadata), for the caller to
// release; ok is false otherwise.
func withSchema(current *arrow.Schema, recs []arrow.RecordBatch) (_ []arrow.RecordBatch, ok bool) {
	for _, rec := range recs {
		sc := rec.Schema()
		if sc.NumFields() != current.NumFields() {
			return nil, false
		}
		for i, f := range sc.Fields() {
			c := current.Field(i)
			if f.Name != c.Name || f.Nullable != c.Nullable || !arrow.TypeEqual(f.Type, c.Type) {
				return nil, false
			}
		}
	}
	out := make([]arrow.RecordBatch, len(recs))
	for i, rec := range recs {
		out[i] = array.NewRecordBatch(current, rec.Columns(), rec.NumRows())
	}
	return out, true
}
