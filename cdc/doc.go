// Package cdc embeds tidemark's change stream in a Go program: open a
// source (PostgreSQL; MySQL/MariaDB), receive its row changes as typed
// Events (or as JSON in one of tidemark's event shapes: tidemark,
// debezium, beam, the bytes `tidemark tail --format` prints), acknowledge
// them, and stop by MaxRecords, MaxRuntime, PollTimeout or the context.
//
// # Modes
//
// Ephemeral (the default): a Stream reads from the source's current
// position through a temporary replication slot of its own (MySQL: a
// binlog dump under a server id of its own), exactly as `tidemark tail`
// does, and stores nothing. Changes committed before Open returns, or
// while no Stream is open, are not delivered; Ack records how far the
// program got (Stream.Acked) in memory only.
//
// Resumable (Config.PositionName, PostgreSQL only): a durable named
// position, a slot and a checkpoint file of its own, so that the next
// Open with the name continues after the last acknowledged event, even
// after a SIGKILL; at-least-once, exactly once after deduplication on
// Event.Position. position.go states the contract; DropPosition removes
// a position (its slot keeps the source's WAL while no program reads it).
//
// # Stopping
//
// Next returns io.EOF once the stream has ended by a limit: MaxRecords
// events were delivered, MaxRuntime passed (also while Next is blocked
// waiting for a change on an idle database), or PollTimeout passed
// without an event. The context passed to Open stops the stream too;
// the one passed to Next only abandons that call.
//
// # Positions
//
// Every event carries its source position (Event.Position: the
// transaction's commit LSN and the event's sequence number in it). It is
// unique and increasing along a source's stream: deduplicate on it.
//
// # Secrets
//
// The source URL's password never appears in an error or, at any level,
// in the logs written to Config.Logger.
package cdc
