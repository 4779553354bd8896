// Package event is the one codec from the change model (change.Change,
// change.DeadLetter, change.Message) to bytes a consumer reads, in a named
// shape. `tidemark tail` prints with it, and so will every other consumer
// of the stream (the Kafka sink, the embeddable API): one shape means one
// byte form everywhere.
//
// The shapes (docs/tail.md shows one of each):
//
//   - tidemark: everything tidemark knows. op, the position (lsn + seq, and
//     formatted as the source prints it), the transaction id, the commit
//     time, the key columns, the columns the source did not send
//     (unchanged TOAST: their value is null and must not be read as NULL),
//     a dead-letter row's error and raw text, logical messages. Values are
//     for people: exact decimals as strings, dates and timestamps in
//     ISO 8601.
//   - debezium: Debezium's change event value (before, after, source, op,
//     ts_ms, transaction), its source block for the source's connector
//     (postgresql, mysql), and values as Debezium encodes them with its
//     default settings through Kafka Connect's JSON converter (decimals as
//     base64 of the unscaled two's-complement integer, dates as days,
//     times and timestamps as microseconds, timestamptz as an ISO string,
//     unchanged TOAST as __debezium_unavailable_value). With
//     Options.Schema the {"schema": ..., "payload": ...} form, the schema
//     in Kafka Connect's type names.
//   - beam: the JSON of Apache Beam's SourceRecordJson.SourceRecordJsonMapper
//     (DebeziumIO), which the Apache Hop Debezium transform emits:
//     metadata{connector, version, name, database, schema, table},
//     before{fields} and after{fields}; a delete has after null. It has no
//     op: a truncate is before and after null.
//
// What the Debezium and Beam shapes cannot hold is written as an
// extension, never dropped: a dead-letter row is the envelope with before
// and after null and the top-level fields "error" and "raw" (the tidemark
// shape's names). Positions: every change of a transaction carries the
// transaction's commit position in lsn (Debezium gives each change its
// own LSN); the change's order inside it is seq (tidemark) or the second
// element of source.sequence (debezium). (lsn, seq) is unique and
// increasing, the key to deduplicate on.
//
// An Encoder is not safe for concurrent use.
package event
