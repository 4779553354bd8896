// Package lake is where tidemark meets the table format.
//
// The table-format contract lives in the subpackages, one per format:
// iceberg/ (Apache Iceberg through iceberg-go) today, delta/ later. A
// subpackage owns everything format-specific: the catalog, table layout,
// snapshot summaries, schema evolution and the Arrow schema that records
// must carry to be appended.
//
// This package deliberately defines no big interface. The packages that
// write and read tables (bronze, silver, verify) each declare the small
// interface they need next to the code that calls it, for example
//
//	type appender interface {
//		Append(ctx context.Context, recs []arrow.RecordBatch, props map[string]string) error
//		Summary() map[string]string
//	}
//
// and *iceberg.Table satisfies it. When a second format arrives, the
// interfaces that both implement get a conformance suite (laketest) that
// both run.
//
// # Naming
//
// Tables are named by identifiers, a slice of levels whose last element is
// the table name and whose other elements are the namespace:
//
//	bronze.<source>.<schema>.<table>  = namespace ["bronze", source, schema] + table
//	silver.<source>.<schema>.<table>  = namespace ["silver", source, schema] + table
//	bronze.<source>._messages         = namespace ["bronze", source]         + "_messages"
//	bronze.<source>._dead_letter      = namespace ["bronze", source]         + "_dead_letter"
//
// Levels must be non-empty and must not contain '.': other engines
// (PyIceberg, Spark, Trino) address tables by the dotted string, which would
// otherwise be ambiguous.
//
// # Positions
//
// Every commit that moves a table forward carries tidemark's own keys in
// its snapshot summary (tidemark.position, tidemark.watermark for bronze;
// tidemark.bronze-snapshot for silver), committed atomically with the data.
// The summary of a table's current snapshot is therefore its cursor: after a
// crash, a writer reads it back and resumes from there.
package lake
