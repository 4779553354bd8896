package fault

// Named errors of the Kafka transport (internal/transport/kafka). They live
// here with the others so that docs/operations.md's table is checked
// against every code (TestDocsNameEveryCode).
var (
	// ErrKafkaSendFailed: the brokers did not acknowledge a record (an
	// error, or kafka.send_timeout passed). Nothing after the last
	// checkpoint was acknowledged to the source; a new session resends it.
	ErrKafkaSendFailed = &Error{Class: Transient, Code: "kafka_send_failed"}
	// ErrKafkaMessageTooLarge: an event is larger than
	// kafka.max_message_bytes, or a broker refused it as too large.
	ErrKafkaMessageTooLarge = &Error{Class: Fatal, Code: "kafka_message_too_large"}
	// ErrKafkaRetention: a topic's retention (or cleanup policy) would
	// delete what was acknowledged before a loader reads it.
	ErrKafkaRetention = &Error{Class: Config, Code: "kafka_retention"}
	// ErrKafkaGap: tidemark load cannot read on from where the lake stands
	// in a topic partition: the broker deleted records it had not loaded
	// (retention), or the partition holds fewer records than the lake has
	// loaded (a recreated topic). Loading on would silently lose changes.
	ErrKafkaGap = &Error{Class: Fatal, Code: "kafka_gap"}
)
