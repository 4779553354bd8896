package typemap_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidemark/tidemark/internal/coltype"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
)

// numeric(p,s)'s atttypmod.
func numMod(p, s int) int32 { return int32(p<<16|(s&0x7ff)) + 4 }

// OIDs of the user-defined types fakeLookup knows.
const (
	moodOID       = 50001 // enum
	priceOID      = 50002 // domain over numeric(10,2)
	posintOID     = 50003 // domain over integer
	posintArrOID  = 50004 // posint[]
	pairOID       = 50005 // composite
	price2OID     = 50006 // domain over price
	intlistOID    = 50007 // domain over integer[]
	moodArrOID    = 50008 // mood[]
	myboxOID      = 50009 // domain over box
	myboxArrOID   = 50010 // mybox[]
	loopOID       = 50011 // domain over itself: a broken catalog
	pairArrOID    = 50012 // pair[]
	price2ArrOID  = 50013 // price2[]
	missingOID    = 50099
	tsArrDomOID   = 50014 // domain over timestamptz[]
	citextOID     = 50015 // extension base type
	citextArrOID  = 50016
	intlistArrOID = 50017 // intlist[]: array of a domain over an array
)

func fakeLookup(oid uint32) (typemap.TypeInfo, error) {
	types := map[uint32]typemap.TypeInfo{
		moodOID:       {OID: moodOID, Name: "mood", Kind: 'e', Delim: ',', TypMod: -1},
		priceOID:      {OID: priceOID, Name: "price", Kind: 'd', BaseOID: pgtype.NumericOID, Delim: ',', TypMod: numMod(10, 2)},
		posintOID:     {OID: posintOID, Name: "posint", Kind: 'd', BaseOID: pgtype.Int4OID, Delim: ',', TypMod: -1},
		posintArrOID:  {OID: posintArrOID, Name: "_posint", Kind: 'b', ElemOID: posintOID, Delim: ',', TypMod: -1},
		pairOID:       {OID: pairOID, Name: "pair", Kind: 'c', Delim: ',', TypMod: -1},
		price2OID:     {OID: price2OID, Name: "price2", Kind: 'd', BaseOID: priceOID, Delim: ',', TypMod: -1},
		intlistOID:    {OID: intlistOID, Name: "intlist", Kind: 'd', BaseOID: pgtype.Int4ArrayOID, Delim: ',', TypMod: -1},
		moodArrOID:    {OID: moodArrOID, Name: "_mood", Kind: 'b', ElemOID: moodOID, Delim: ',', TypMod: -1},
		myboxOID:      {OID: myboxOID, Name: "mybox", Kind: 'd', BaseOID: pgtype.BoxOID, Delim: ';', TypMod: -1},
		myboxArrOID:   {OID: myboxArrOID, Name: "_mybox", Kind: 'b', ElemOID: myboxOID, Delim: ',', TypMod: -1},
		loopOID:       {OID: loopOID, Name: "loop", Kind: 'd', BaseOID: loopOID, Delim: ',', TypMod: -1},
		pairArrOID:    {OID: pairArrOID, Name: "_pair", Kind: 'b', ElemOID: pairOID, Delim: ',', TypMod: -1},
		price2ArrOID:  {OID: price2ArrOID, Name: "_price2", Kind: 'b', ElemOID: price2OID, Delim: ',', TypMod: -1},
		tsArrDomOID:   {OID: tsArrDomOID, Name: "stamps", Kind: 'd', BaseOID: pgtype.TimestamptzArrayOID, Delim: ',', TypMod: -1},
		citextOID:     {OID: citextOID, Name: "citext", Kind: 'b', Delim: ',', TypMod: -1},
		citextArrOID:  {OID: citextArrOID, Name: "_citext", Kind: 'b', ElemOID: citextOID, Delim: ',', TypMod: -1},
		intlistArrOID: {OID: intlistArrOID, Name: "_intlist", Kind: 'b', ElemOID: intlistOID, Delim: ',', TypMod: -1},
	}
	if ti, ok := types[oid]; ok {
		return ti, nil
	}
	return typemap.TypeInfo{}, fmt.Errorf("no type with oid %d", oid)
}

// specialText are values a ValueError may name: they are not data.
var specialText = map[string]bool{"NaN": true, "Infinity": true, "-Infinity": true, "24:00:00": true}

// null marks a SQL NULL in the text column of a decode case.
const null = "\x00NULL"

type decodeCase struct {
	oid    uint32
	typmod int32
	text   string
	want   string // render of the decoded value
	err    string // substring of the ValueError reason, instead of want
}

func TestDecode(t *testing.T) {
	const (
		maxI64 = "9223372036854775807"
		minI64 = "-9223372036854775808"
	)
	digits1000 := "1" + strings.Repeat("0", 999)
	d38 := strings.Repeat("9", 28) + "." + strings.Repeat("9", 10)
	cases := map[string]decodeCase{
		"null":                {pgtype.Int4OID, -1, null, "NULL", ""},
		"int2":                {pgtype.Int2OID, -1, "-32768", "-32768", ""},
		"int4 max":            {pgtype.Int4OID, -1, "2147483647", "2147483647", ""},
		"int4 min":            {pgtype.Int4OID, -1, "-2147483648", "-2147483648", ""},
		"int4 overflow":       {pgtype.Int4OID, -1, "2147483648", "", "out of range"},
		"int4 malformed":      {pgtype.Int4OID, -1, "12a", "", "malformed"},
		"int4 empty":          {pgtype.Int4OID, -1, "", "", "malformed"},
		"int8 max":            {pgtype.Int8OID, -1, maxI64, maxI64, ""},
		"int8 min":            {pgtype.Int8OID, -1, minI64, minI64, ""},
		"int4 minus only":     {pgtype.Int4OID, -1, "-", "", "malformed"},
		"int4 plus sign":      {pgtype.Int4OID, -1, "+7", "7", ""},
		"int4 below min":      {pgtype.Int4OID, -1, "-2147483649", "", "out of range"},
		"int8 18 digits":      {pgtype.Int8OID, -1, "-999999999999999999", "-999999999999999999", ""},
		"int8 19 digits":      {pgtype.Int8OID, -1, "1000000000000000000", "1000000000000000000", ""},
		"int8 overflow":       {pgtype.Int8OID, -1, "9223372036854775808", "", "out of range"},
		"int8 malformed":      {pgtype.Int8OID, -1, "1 ", "", "malformed"},
		"oid max":             {pgtype.OIDOID, -1, "4294967295", "4294967295", ""},
		"xid":                 {pgtype.XIDOID, -1, "742", "742", ""},
		"xid8":                {pgtype.XID8OID, -1, "12884902642", "12884902642", ""},
		"xid8 above int64":    {pgtype.XID8OID, -1, "9223372036854775808", "", "out of range"},
		"float4":              {pgtype.Float4OID, -1, "1.1", "1.1", ""},
		"float4 shortest":     {pgtype.Float4OID, -1, "3.4028235e+38", "3.4028235e+38", ""},
		"float4 denormal":     {pgtype.Float4OID, -1, "1e-45", "1e-45", ""},
		"float4 NaN":          {pgtype.Float4OID, -1, "NaN", "NaN", ""},
		"float4 Infinity":     {pgtype.Float4OID, -1, "Infinity", "+Inf", ""},
		"float4 -Infinity":    {pgtype.Float4OID, -1, "-Infinity", "-Inf", ""},
		"float4 -0":           {pgtype.Float4OID, -1, "-0", "-0", ""},
		"float8":              {pgtype.Float8OID, -1, "0.1", "0.1", ""},
		"float8 17 digits":    {pgtype.Float8OID, -1, "0.30000000000000004", "0.30000000000000004", ""},
		"float8 max":          {pgtype.Float8OID, -1, "1.7976931348623157e+308", "1.7976931348623157e+308", ""},
		"float8 min denorm":   {pgtype.Float8OID, -1, "5e-324", "5e-324", ""},
		"float8 NaN":          {pgtype.Float8OID, -1, "NaN", "NaN", ""},
		"float8 Infinity":     {pgtype.Float8OID, -1, "Infinity", "+Inf", ""},
		"float8 -Infinity":    {pgtype.Float8OID, -1, "-Infinity", "-Inf", ""},
		"float8 -0":           {pgtype.Float8OID, -1, "-0", "-0", ""},
		"float8 malformed":    {pgtype.Float8OID, -1, "1.2.3", "", "malformed"},
		"bool t":              {pgtype.BoolOID, -1, "t", "true", ""},
		"bool f":              {pgtype.BoolOID, -1, "f", "false", ""},
		"bool other":          {pgtype.BoolOID, -1, "true", "", "malformed"},
		"text":                {pgtype.TextOID, -1, "héllo 🌊", `"héllo 🌊"`, ""},
		"text empty":          {pgtype.TextOID, -1, "", `""`, ""},
		"text not utf8":       {pgtype.TextOID, -1, "\xff\xfe", "", "UTF-8"},
		"bpchar padding":      {pgtype.BPCharOID, 5 + 4, "ab   ", `"ab   "`, ""},
		"varchar":             {pgtype.VarcharOID, 10 + 4, "x", `"x"`, ""},
		"name":                {pgtype.NameOID, -1, "pg_class", `"pg_class"`, ""},
		"qchar":               {pgtype.QCharOID, -1, `\377`, `"\\377"`, ""},
		"bytea":               {pgtype.ByteaOID, -1, `\x00ff10`, "0x00ff10", ""},
		"bytea empty":         {pgtype.ByteaOID, -1, `\x`, "0x", ""},
		"bytea escape fmt":    {pgtype.ByteaOID, -1, `abc\000`, "", "hex format"},
		"bytea odd hex":       {pgtype.ByteaOID, -1, `\x0`, "", "malformed"},
		"uuid":                {pgtype.UUIDOID, -1, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`, ""},
		"json big int":        {pgtype.JSONOID, -1, `{"n": 9007199254740993}`, `"{\"n\": 9007199254740993}"`, ""},
		"jsonb":               {pgtype.JSONBOID, -1, `{"a": [1, 2.50]}`, `"{\"a\": [1, 2.50]}"`, ""},
		"interval":            {pgtype.IntervalOID, -1, "P1Y2M3DT4H5M6.5S", `"P1Y2M3DT4H5M6.5S"`, ""},
		"money":               {790, -1, "$1,234.50", `"$1,234.50"`, ""},
		"timetz":              {pgtype.TimetzOID, -1, "04:05:06.789+05:30", `"04:05:06.789+05:30"`, ""},
		"int4range":           {pgtype.Int4rangeOID, -1, "[1,10)", `"[1,10)"`, ""},
		"unknown builtin":     {3734, -1, "english", `"english"`, ""}, // regconfig: not built in here, looked up
		"numeric unconstr":    {pgtype.NumericOID, -1, "123.4500", `"123.4500"`, ""},
		"numeric NaN str":     {pgtype.NumericOID, -1, "NaN", `"NaN"`, ""},
		"numeric inf str":     {pgtype.NumericOID, -1, "-Infinity", `"-Infinity"`, ""},
		"numeric 1000 digit":  {pgtype.NumericOID, -1, digits1000, `"` + digits1000 + `"`, ""},
		"numeric(39,0) str":   {pgtype.NumericOID, numMod(39, 0), "1", `"1"`, ""},
		"numeric(12,2)":       {pgtype.NumericOID, numMod(12, 2), "-1234567890.12", "-1234567890.12", ""},
		"numeric(12,2) zero":  {pgtype.NumericOID, numMod(12, 2), "0.00", "0.00", ""},
		"numeric(12,2) frac":  {pgtype.NumericOID, numMod(12, 2), "0.05", "0.05", ""},
		"numeric(12,2) short": {pgtype.NumericOID, numMod(12, 2), "7.5", "7.50", ""},
		"numeric(12,2) NaN":   {pgtype.NumericOID, numMod(12, 2), "NaN", "", "NaN is not representable in decimal(12,2)"},
		"numeric(12,2) inf":   {pgtype.NumericOID, numMod(12, 2), "Infinity", "", "not representable"},
		"numeric too many":    {pgtype.NumericOID, numMod(3, 0), "1234", "", "more than 3 significant digits"},
		"numeric extra frac":  {pgtype.NumericOID, numMod(5, 2), "1.234", "", "more fractional digits"},
		"numeric zero frac":   {pgtype.NumericOID, numMod(5, 2), "1.230", "1.23", ""},
		"numeric malformed":   {pgtype.NumericOID, numMod(5, 2), "1e5", "", "malformed"},
		"numeric lone dot":    {pgtype.NumericOID, numMod(5, 2), ".", "", "malformed"},
		"numeric(38,10) max":  {pgtype.NumericOID, numMod(38, 10), d38, d38, ""},
		"numeric(38,10) min":  {pgtype.NumericOID, numMod(38, 10), "-" + d38, "-" + d38, ""},
		"numeric(38,10) tiny": {pgtype.NumericOID, numMod(38, 10), "-0.0000000001", "-0.0000000001", ""},
		"numeric(38,0) big":   {pgtype.NumericOID, numMod(38, 0), "12345678901234567890123456789012345678", "12345678901234567890123456789012345678", ""},
		"numeric(2,5)":        {pgtype.NumericOID, numMod(2, 5), "0.00012", "0.00012", ""},
		"numeric(2,-3)":       {pgtype.NumericOID, numMod(2, -3), "12000", "12000", ""},
		"date":                {pgtype.DateOID, -1, "2024-01-02", "19724 (2024-01-02)", ""},
		"date epoch":          {pgtype.DateOID, -1, "1970-01-01", "0 (1970-01-01)", ""},
		"date BC":             {pgtype.DateOID, -1, "0044-03-15 BC", "-735160 (0044-03-15 BC)", ""},
		"date 1 BC leap":      {pgtype.DateOID, -1, "0001-02-29 BC", "-719469 (0001-02-29 BC)", ""},
		"date 2 BC not leap":  {pgtype.DateOID, -1, "0002-02-29 BC", "", "malformed"},
		"date 4713 BC":        {pgtype.DateOID, -1, "4714-11-24 BC", "-2440588 (4714-11-24 BC)", ""},
		"date year 10000":     {pgtype.DateOID, -1, "10000-01-01", "2932897 (10000-01-01)", ""},
		"date max":            {pgtype.DateOID, -1, "5874897-12-31", "2145042905 (5874897-12-31)", ""},
		"date infinity":       {pgtype.DateOID, -1, "infinity", "2147483647 (infinity)", ""},
		"date -infinity":      {pgtype.DateOID, -1, "-infinity", "-2147483647 (-infinity)", ""},
		"date year 0":         {pgtype.DateOID, -1, "0000-01-01", "", "malformed"},
		"date feb 30":         {pgtype.DateOID, -1, "2023-02-29", "", "malformed"},
		"date trailing":       {pgtype.DateOID, -1, "2023-02-01 AD", "", "malformed"},
		"time":                {pgtype.TimeOID, -1, "03:04:05", "11045000000 (03:04:05)", ""},
		"time frac":           {pgtype.TimeOID, -1, "23:59:59.999999", "86399999999 (23:59:59.999999)", ""},
		"time frac 1":         {pgtype.TimeOID, -1, "00:00:00.5", "500000 (00:00:00.5)", ""},
		"time 24:00":          {pgtype.TimeOID, -1, "24:00:00", "", "24:00:00 is outside"},
		"time 7 digits":       {pgtype.TimeOID, -1, "00:00:00.1234567", "", "more than 6"},
		"time malformed":      {pgtype.TimeOID, -1, "3:04:05", "", "malformed"},
		"ts":                  {pgtype.TimestampOID, -1, "2024-01-02 03:04:05", "1704164645000000 (2024-01-02 03:04:05)", ""},
		"ts infinity":         {pgtype.TimestampOID, -1, "infinity", "9223372036854775807 (infinity)", ""},
		"ts -infinity":        {pgtype.TimestampOID, -1, "-infinity", "-9223372036854775807 (-infinity)", ""},
		"ts BC":               {pgtype.TimestampOID, -1, "0044-03-15 12:00:00 BC", "-63517780800000000 (0044-03-15 12:00:00 BC)", ""},
		"ts year 10000":       {pgtype.TimestampOID, -1, "10000-01-01 00:00:00", "253402300800000000 (10000-01-01 00:00:00)", ""},
		"ts top of int64":     {pgtype.TimestampOID, -1, "294247-01-10 04:00:54.775806", "9223372036854775806 (294247-01-10 04:00:54.775806)", ""},
		"ts = infinity bits":  {pgtype.TimestampOID, -1, "294247-01-10 04:00:54.775807", "", "out of range"},
		"ts beyond int64":     {pgtype.TimestampOID, -1, "294276-12-31 23:59:59.999999", "", "out of range"},
		"ts 4713 BC":          {pgtype.TimestampOID, -1, "4714-11-24 00:00:00 BC", "-210866803200000000 (4714-11-24 00:00:00 BC)", ""},
		"ts with zone":        {pgtype.TimestampOID, -1, "2024-01-02 03:04:05+00", "", "malformed"},
		"tstz":                {pgtype.TimestamptzOID, -1, "2024-01-02 03:04:05.123456+00", "1704164645123456 (2024-01-02 03:04:05.123456+00)", ""},
		"tstz frac 0":         {pgtype.TimestamptzOID, -1, "2024-01-02 03:04:05+00", "1704164645000000 (2024-01-02 03:04:05+00)", ""},
		"tstz frac 1":         {pgtype.TimestamptzOID, -1, "2024-01-02 03:04:05.1+00", "1704164645100000 (2024-01-02 03:04:05.1+00)", ""},
		"tstz frac 2":         {pgtype.TimestamptzOID, -1, "2024-01-02 03:04:05.12+00", "1704164645120000 (2024-01-02 03:04:05.12+00)", ""},
		"tstz frac 3":         {pgtype.TimestamptzOID, -1, "2024-01-02 03:04:05.123+00", "1704164645123000 (2024-01-02 03:04:05.123+00)", ""},
		"tstz frac 4":         {pgtype.TimestamptzOID, -1, "2024-01-02 03:04:05.1234+00", "1704164645123400 (2024-01-02 03:04:05.1234+00)", ""},
		"tstz frac 5":         {pgtype.TimestamptzOID, -1, "2024-01-02 03:04:05.12345+00", "1704164645123450 (2024-01-02 03:04:05.12345+00)", ""},
		"tstz +05:30":         {pgtype.TimestamptzOID, -1, "2024-01-02 03:04:05.5+05:30", "1704144845500000 (2024-01-01 21:34:05.5+00)", ""},
		"tstz -03:30":         {pgtype.TimestamptzOID, -1, "2024-01-02 03:04:05-03:30", "1704177245000000 (2024-01-02 06:34:05+00)", ""},
		"tstz LMT seconds":    {pgtype.TimestamptzOID, -1, "1850-01-01 00:00:00+00:53:28", "-3786828808000000 (1849-12-31 23:06:32+00)", ""},
		"tstz BC":             {pgtype.TimestamptzOID, -1, "0044-03-15 10:00:00+00 BC", "-63517788000000000 (0044-03-15 10:00:00+00 BC)", ""},
		"tstz before epoch":   {pgtype.TimestamptzOID, -1, "1969-12-31 23:59:59.999999+00", "-1 (1969-12-31 23:59:59.999999+00)", ""},
		"tstz infinity":       {pgtype.TimestamptzOID, -1, "infinity", "9223372036854775807 (infinity)", ""},
		"tstz -infinity":      {pgtype.TimestamptzOID, -1, "-infinity", "-9223372036854775807 (-infinity)", ""},
		"tstz no zone":        {pgtype.TimestamptzOID, -1, "2024-01-02 03:04:05", "", "malformed"},
		"tstz BC before zone": {pgtype.TimestamptzOID, -1, "0044-03-15 10:00:00 BC+00", "", "malformed"},
		"int4[]":              {pgtype.Int4ArrayOID, -1, "{1,-2,NULL,3}", "[1, -2, NULL, 3]", ""},
		"int4[] empty":        {pgtype.Int4ArrayOID, -1, "{}", "[]", ""},
		"int4[] bad element":  {pgtype.Int4ArrayOID, -1, "{1,x}", "", "element 2: malformed"},
		"int4[] multi-dim":    {pgtype.Int4ArrayOID, -1, "{{1,2},{3,4}}", "", "multi-dimensional"},
		"int4[] lower bound":  {pgtype.Int4ArrayOID, -1, "[0:2]={1,2,3}", "", "non-default lower bounds"},
		"int4[] unclosed":     {pgtype.Int4ArrayOID, -1, "{1,2", "", "malformed array"},
		"text[] quoting":      {pgtype.TextArrayOID, -1, `{"a,b","c\"d","e\\f",NULL,"NULL",null,""," x ",plain}`, `["a,b", "c\"d", "e\\f", NULL, "NULL", NULL, "", " x ", "plain"]`, ""},
		"text[] braces":       {pgtype.TextArrayOID, -1, `{"{x}","}"}`, `["{x}", "}"]`, ""},
		"varchar[]":           {pgtype.VarcharArrayOID, 5 + 4, `{ab,"c d"}`, `["ab", "c d"]`, ""},
		"bytea[]":             {pgtype.ByteaArrayOID, -1, `{"\\x0102",NULL}`, "[0x0102, NULL]", ""},
		"numeric(5,2)[]":      {pgtype.NumericArrayOID, numMod(5, 2), "{1.50,NaN}", "", "element 2: NaN is not representable"},
		"numeric[] strings":   {pgtype.NumericArrayOID, -1, "{1.50,NaN,Infinity}", `["1.50", "NaN", "Infinity"]`, ""},
		"float8[] specials":   {pgtype.Float8ArrayOID, -1, "{NaN,-Infinity,-0,1e+300}", "[NaN, -Inf, -0, 1e+300]", ""},
		"tstz[]":              {pgtype.TimestamptzArrayOID, -1, `{"2024-01-02 03:04:05+00",infinity}`, "[1704164645000000 (2024-01-02 03:04:05+00), 9223372036854775807 (infinity)]", ""},
		"date[]":              {pgtype.DateArrayOID, -1, `{"0044-03-15 BC",2024-01-02}`, "[-735160 (0044-03-15 BC), 19724 (2024-01-02)]", ""},
		"bool[]":              {pgtype.BoolArrayOID, -1, "{t,f,NULL}", "[true, false, NULL]", ""},
		"box[] semicolons":    {pgtype.BoxArrayOID, -1, "{(1,1),(0,0);(2,2),(1,1)}", `["(1,1),(0,0)", "(2,2),(1,1)"]`, ""},
		"int4range[]":         {pgtype.Int4rangeArrayOID, -1, `{"[1,3)",empty}`, `["[1,3)", "empty"]`, ""},
		"enum":                {moodOID, -1, "happy", `"happy"`, ""},
		"enum[]":              {moodArrOID, -1, `{happy,"so so"}`, `["happy", "so so"]`, ""},
		"domain numeric":      {priceOID, -1, "12.50", "12.50", ""},
		"domain NaN":          {priceOID, -1, "NaN", "", "NaN is not representable in decimal(10,2)"},
		"domain of domain":    {price2OID, -1, "99999999.99", "99999999.99", ""},
		"domain int":          {posintOID, -1, "7", "7", ""},
		"domain[]":            {posintArrOID, -1, "{1,2}", "[1, 2]", ""},
		"domain of domain[]":  {price2ArrOID, -1, "{1.00,NULL}", "[1.00, NULL]", ""},
		"domain over array":   {intlistOID, -1, "{1,2}", "[1, 2]", ""},
		"domain tstz[]":       {tsArrDomOID, -1, `{"2024-01-02 03:04:05+00"}`, "[1704164645000000 (2024-01-02 03:04:05+00)]", ""},
		"domain over box[]":   {myboxArrOID, -1, "{(1,1),(0,0);(2,2),(1,1)}", `["(1,1),(0,0)", "(2,2),(1,1)"]`, ""},
		"composite":           {pairOID, -1, `(1,"a b")`, `"(1,\"a b\")"`, ""},
		"composite[]":         {pairArrOID, -1, `{"(1,\"a b\")",NULL}`, `["(1,\"a b\")", NULL]`, ""},
		"extension type":      {citextOID, -1, "MiXed", `"MiXed"`, ""},
		"extension type[]":    {citextArrOID, -1, "{MiXed}", `["MiXed"]`, ""},
		"array of arrays":     {intlistArrOID, -1, `{"{1,2}","{3}",NULL}`, "[[1, 2], [3], NULL]", ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			lookup := fakeLookup
			if c.oid == 3734 {
				lookup = func(uint32) (typemap.TypeInfo, error) {
					return typemap.TypeInfo{OID: 3734, Name: "regconfig", Kind: 'b', Delim: ',', TypMod: -1}, nil
				}
			}
			m, err := typemap.Map(typemap.Column{Name: "c", TypeOID: c.oid, TypeMod: c.typmod}, lookup)
			if err != nil {
				t.Fatalf("Map: %v", err)
			}
			var text []byte
			if c.text != null {
				text = []byte(c.text)
			}
			v, err := m.Decode(text)
			if aerr := checkAppendText(m, text, v, err); aerr != nil {
				t.Fatal(aerr)
			}
			if c.err != "" {
				var ve *coltype.ValueError
				if !errors.As(err, &ve) {
					t.Fatalf("Decode = %s, %v; want a ValueError containing %q", render(v, m.ArrowType()), err, c.err)
				}
				if !strings.Contains(ve.Reason, c.err) {
					t.Fatalf("reason %q does not contain %q", ve.Reason, c.err)
				}
				if ve.Column != "c" || ve.Type != m.SourceType() {
					t.Fatalf("ValueError names %q (%s), want %q (%s)", ve.Column, ve.Type, "c", m.SourceType())
				}
				// Special values (NaN, 24:00:00) are named; data never is.
				if !specialText[c.text] && len(c.text) > 3 && strings.Contains(err.Error(), c.text) {
					t.Fatalf("error %q leaks the value", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got := render(v, m.ArrowType()); got != c.want {
				t.Fatalf("Decode = %s, want %s", got, c.want)
			}
		})
	}
}

// The exact bits matter for the float specials: render alone would not
// tell a quiet NaN payload or the sign of zero apart reliably.
func TestDecodeFloatBits(t *testing.T) {
	m8, _ := typemap.Map(typemap.Column{Name: "f", TypeOID: pgtype.Float8OID, TypeMod: -1}, nil)
	m4, _ := typemap.Map(typemap.Column{Name: "f", TypeOID: pgtype.Float4OID, TypeMod: -1}, nil)
	v, _ := m8.Decode([]byte("-0"))
	if f := v.(float64); f != 0 || !math.Signbit(f) {
		t.Errorf("float8 -0 decoded to %v", f)
	}
	v, _ = m4.Decode([]byte("-0"))
	if f := v.(float32); f != 0 || !math.Signbit(float64(f)) {
		t.Errorf("float4 -0 decoded to %v", f)
	}
	v, _ = m8.Decode([]byte("NaN"))
	if f := v.(float64); !math.IsNaN(f) {
		t.Errorf("float8 NaN decoded to %v", f)
	}
	v, _ = m4.Decode([]byte("1.1"))
	if f := v.(float32); f != float32(1.1) {
		t.Errorf("float4 1.1 decoded to %v", f)
	}
}

func TestMapErrors(t *testing.T) {
	cases := map[string]struct {
		oid    uint32
		lookup typemap.Lookup
		want   string
	}{
		"no lookup":     {missingOID, nil, "no Lookup"},
		"lookup fails":  {missingOID, fakeLookup, "no type with oid"},
		"domain cycle":  {loopOID, fakeLookup, "deeper than"},
		"domain nobase": {1, func(uint32) (typemap.TypeInfo, error) { return typemap.TypeInfo{Name: "d", Kind: 'd'}, nil }, "no base type"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := typemap.Map(typemap.Column{Name: "col", TypeOID: c.oid, TypeMod: -1}, c.lookup)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"col"`) {
				t.Fatalf("Map error = %v, want one naming the column and containing %q", err, c.want)
			}
		})
	}
}

func TestZeroMapping(t *testing.T) {
	if _, err := (typemap.Mapping{}).Decode([]byte("1")); err == nil {
		t.Fatal("Decode on a zero Mapping succeeded")
	}
}

// TestTimeAs: time_as chooses how a time column (and a time[] or a domain
// over time) lands; the text mode keeps PostgreSQL's text as it is, 24:00:00
// included, and micros counts microseconds since midnight.
func TestTimeAs(t *testing.T) {
	timeDom := func(oid uint32) (typemap.TypeInfo, error) {
		return typemap.TypeInfo{OID: oid, Name: "clock", Kind: 'd', BaseOID: pgtype.TimeOID, Delim: ',', TypMod: -1}, nil
	}
	cases := []struct {
		as      typemap.TimeAs
		oid     uint32
		iceberg string
		text    string
		want    string
		err     string
	}{
		{"", pgtype.TimeOID, "time", "03:04:05", "11045000000 (03:04:05)", ""},
		{"", pgtype.TimeOID, "time", "24:00:00", "", "24:00:00 is outside"},
		{typemap.TimeAsTime, pgtype.TimeOID, "time", "00:00:00.5", "500000 (00:00:00.5)", ""},
		{typemap.TimeAsText, pgtype.TimeOID, "string", "03:04:05", `"03:04:05"`, ""},
		{typemap.TimeAsText, pgtype.TimeOID, "string", "23:59:59.999999", `"23:59:59.999999"`, ""},
		{typemap.TimeAsText, pgtype.TimeOID, "string", "24:00:00", `"24:00:00"`, ""},
		{typemap.TimeAsText, pgtype.TimeOID, "string", null, "NULL", ""},
		{typemap.TimeAsText, pgtype.TimeArrayOID, "list<string>", "{12:00:00,NULL,24:00:00}", `["12:00:00", NULL, "24:00:00"]`, ""},
		{typemap.TimeAsText, 50100, "string", "00:00:00.25", `"00:00:00.25"`, ""},
		{typemap.TimeAsMicros, pgtype.TimeOID, "long", "03:04:05", "11045000000", ""},
		{typemap.TimeAsMicros, pgtype.TimeOID, "long", "00:00:00.000001", "1", ""},
		{typemap.TimeAsMicros, pgtype.TimeOID, "long", "24:00:00", "86400000000", ""},
		{typemap.TimeAsMicros, pgtype.TimeOID, "long", "24:00:00.5", "", "malformed"},
		{typemap.TimeAsMicros, pgtype.TimeArrayOID, "list<long>", "{00:00:01}", "[1000000]", ""},
		{typemap.TimeAsMicros, 50100, "long", "00:00:00.25", "250000", ""},
		// timetz is a string whatever time_as says.
		{typemap.TimeAsMicros, pgtype.TimetzOID, "string", "03:04:05+02", `"03:04:05+02"`, ""},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s/%d/%s", c.as, c.oid, c.text)
		m, err := typemap.Options{TimeAs: c.as}.Map(typemap.Column{Name: "c", TypeOID: c.oid, TypeMod: -1}, timeDom)
		if err != nil {
			t.Fatalf("%s: Map: %v", name, err)
		}
		if got := m.IcebergType().String(); got != c.iceberg {
			t.Errorf("%s: Iceberg type %s, want %s", name, got, c.iceberg)
		}
		var text []byte
		if c.text != null {
			text = []byte(c.text)
		}
		v, err := m.Decode(text)
		if aerr := checkAppendText(m, text, v, err); aerr != nil {
			t.Errorf("%s: %v", name, aerr)
		}
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: Decode = %s, %v; want an error containing %q", name, render(v, m.ArrowType()), err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Decode: %v", name, err)
		} else if got := render(v, m.ArrowType()); got != c.want {
			t.Errorf("%s: Decode = %s, want %s", name, got, c.want)
		}
	}
}
