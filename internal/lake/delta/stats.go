package delta

import (
	"encoding/json"
	"math"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// Per-file statistics (PROTOCOL.md, "Per-file Statistics"): numRecords,
// and per column nullCount, minValues and maxValues, mirroring the schema.
// Min/max are written for numbers, decimals, dates, timestamps and
// strings (bounds are tight but for the truncations the protocol allows:
// strings cut to statsPrefix characters, timestamps to milliseconds);
// booleans, binaries, lists and maps get a nullCount only. A column whose
// values JSON cannot carry (NaN, ±Inf, invalid UTF-8) gets no min/max.

// statsPrefix is the length (in characters) strings are cut to in
// minValues / maxValues, as Delta's reference implementation does.
const statsPrefix = 32

const (
	kindNone = iota
	kindInt
	kindFloat
	kindString
	kindDecimal
	kindDate
	kindTS
	kindTSNtz
	kindStruct
)

type colStats struct {
	name     string
	kind     int
	scale    int32
	nulls    int64
	has, bad bool
	minI     int64
	maxI     int64
	minF     float64
	maxF     float64
	minS     string
	maxS     string
	minD     decimal128.Num
	maxD     decimal128.Num
	children []*colStats
}

// fileStats accumulates the statistics of the batches written to one file.
type fileStats struct {
	rows int64
	cols []*colStats
}

func newFileStats(sc *arrow.Schema) *fileStats {
	fs := &fileStats{}
	for _, f := range sc.Fields() {
		fs.cols = append(fs.cols, newColStats(f))
	}
	return fs
}

func newColStats(f arrow.Field) *colStats {
	c := &colStats{name: f.Name}
	switch t := f.Type.(type) {
	case *arrow.Int8Type, *arrow.Int16Type, *arrow.Int32Type, *arrow.Int64Type:
		c.kind = kindInt
	case *arrow.Float32Type, *arrow.Float64Type:
		c.kind = kindFloat
	case *arrow.StringType, *arrow.LargeStringType:
		c.kind = kindString
	case *arrow.Decimal128Type:
		c.kind, c.scale = kindDecimal, t.Scale
	case *arrow.Date32Type:
		c.kind = kindDate
	case *arrow.TimestampType:
		c.kind = kindTS
		if t.TimeZone == "" {
			c.kind = kindTSNtz
		}
	case *arrow.StructType:
		c.kind = kindStruct
		for _, cf := range t.Fields() {
			c.children = append(c.children, newColStats(cf))
		}
	}
	return c
}

func (fs *fileStats) add(rec arrow.RecordBatch) {
	fs.rows += rec.NumRows()
	for j, c := range fs.cols {
		c.add(rec.Column(j), nil)
	}
}

// add folds arr's values in; parentNull, if not nil, reports the rows
// where an enclosing struct is null (the value is null there too).
func (c *colStats) add(arr arrow.Array, parentNull func(int) bool) {
	isNull := func(i int) bool { return arr.IsNull(i) || (parentNull != nil && parentNull(i)) }
	if c.kind == kindStruct {
		s := arr.(*array.Struct)
		for k, ch := range c.children {
			ch.add(s.Field(k), isNull)
		}
		for i := 0; i < arr.Len(); i++ {
			if isNull(i) {
				c.nulls++
			}
		}
		return
	}
	for i := 0; i < arr.Len(); i++ {
		if isNull(i) {
			c.nulls++
			continue
		}
		if c.kind == kindNone || c.bad {
			continue
		}
		switch c.kind {
		case kindInt, kindDate, kindTS, kindTSNtz:
			var v int64
			switch a := arr.(type) {
			case *array.Int8:
				v = int64(a.Value(i))
			case *array.Int16:
				v = int64(a.Value(i))
			case *array.Int32:
				v = int64(a.Value(i))
			case *array.Int64:
				v = a.Value(i)
			case *array.Date32:
				v = int64(a.Value(i))
			case *array.Timestamp:
				v = int64(a.Value(i))
			}
			if !c.has || v < c.minI {
				c.minI = v
			}
			if !c.has || v > c.maxI {
				c.maxI = v
			}
		case kindFloat:
			var v float64
			switch a := arr.(type) {
			case *array.Float32:
				v = float64(a.Value(i))
			case *array.Float64:
				v = a.Value(i)
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				c.bad = true
				continue
			}
			if !c.has || v < c.minF {
				c.minF = v
			}
			if !c.has || v > c.maxF {
				c.maxF = v
			}
		case kindString:
			var v string
			switch a := arr.(type) {
			case *array.String:
				v = a.Value(i)
			case *array.LargeString:
				v = a.Value(i)
			}
			if !utf8.ValidString(v) {
				c.bad = true
				continue
			}
			if !c.has || v < c.minS {
				c.minS = v
			}
			if !c.has || v > c.maxS {
				c.maxS = v
			}
		case kindDecimal:
			v := arr.(*array.Decimal128).Value(i)
			if !c.has || v.Less(c.minD) {
				c.minD = v
			}
			if !c.has || c.maxD.Less(v) {
				c.maxD = v
			}
		}
		c.has = true
	}
}

// minMax returns the column's JSON min and max, ok false when it has none.
func (c *colStats) minMax() (lo, hi any, ok bool) {
	if !c.has || c.bad {
		return nil, nil, false
	}
	switch c.kind {
	case kindInt:
		return c.minI, c.maxI, true
	case kindFloat:
		return c.minF, c.maxF, true
	case kindDecimal:
		return json.Number(c.minD.ToString(c.scale)), json.Number(c.maxD.ToString(c.scale)), true
	case kindDate:
		return formatDate(int32(c.minI)), formatDate(int32(c.maxI)), true
	case kindTS:
		return statsTimestamp(c.minI, "Z"), statsTimestamp(c.maxI, "Z"), true
	case kindTSNtz:
		return statsTimestamp(c.minI, ""), statsTimestamp(c.maxI, ""), true
	case kindString:
		hi, ok := upperPrefix(c.maxS)
		if !ok {
			return nil, nil, false
		}
		return lowerPrefix(c.minS), hi, true
	}
	return nil, nil, false
}

// lowerPrefix cuts s to statsPrefix characters: a lower bound of s.
func lowerPrefix(s string) string {
	n := 0
	for i := range s {
		if n == statsPrefix {
			return s[:i]
		}
		n++
	}
	return s
}

// upperPrefix returns an upper bound of s of at most statsPrefix+1
// characters: s itself when short enough, else its prefix followed by
// U+10FFFF, which sorts after every other character in UTF-8 byte order.
// ok is false when the character after the prefix is U+10FFFF itself.
func upperPrefix(s string) (string, bool) {
	p := lowerPrefix(s)
	if p == s {
		return s, true
	}
	if r, _ := utf8.DecodeRuneInString(s[len(p):]); r == utf8.MaxRune {
		return "", false
	}
	return p + string(utf8.MaxRune), true
}

func formatDate(d int32) string {
	return time.Unix(int64(d)*86400, 0).UTC().Format("2006-01-02")
}

// statsTimestamp formats µs since the epoch truncated to milliseconds, as
// the protocol says statistics are ("Z" for timestamp, "" for
// timestamp_ntz).
func statsTimestamp(us int64, zone string) string {
	ms := us / 1000
	if us < 0 && us%1000 != 0 {
		ms-- // truncate towards -inf: still a lower bound
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000") + zone
}

// json returns the stats string of an add action.
func (fs *fileStats) json() (string, error) {
	minV, maxV, nulls := map[string]any{}, map[string]any{}, map[string]any{}
	for _, c := range fs.cols {
		c.fill(minV, maxV, nulls)
	}
	b, err := json.Marshal(map[string]any{
		"numRecords": fs.rows,
		"minValues":  minV,
		"maxValues":  maxV,
		"nullCount":  nulls,
	})
	return string(b), err
}

func (c *colStats) fill(minV, maxV, nulls map[string]any) {
	if c.kind == kindStruct {
		cmin, cmax, cnull := map[string]any{}, map[string]any{}, map[string]any{}
		for _, ch := range c.children {
			ch.fill(cmin, cmax, cnull)
		}
		if len(cmin) > 0 {
			minV[c.name] = cmin
			maxV[c.name] = cmax
		}
		nulls[c.name] = cnull
		return
	}
	nulls[c.name] = c.nulls
	if lo, hi, ok := c.minMax(); ok {
		minV[c.name] = lo
		maxV[c.name] = hi
	}
}
