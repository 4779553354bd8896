package config

import (
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Kafka configures the Kafka sink (sink: kafka://...): the topics tidemark
// creates or verifies before the first send, and the producer.
type Kafka struct {
	// Partitions of each topic tidemark creates. Default 1 (a table's
	// changes in one order; keys spread over loaders by table).
	Partitions int `yaml:"partitions"`
	// ReplicationFactor of each topic tidemark creates; -1 (the default):
	// the broker's default.replication.factor.
	ReplicationFactor int `yaml:"replication_factor"`
	// Retention is retention.ms of the topics tidemark creates. Default 7
	// days.
	Retention Duration `yaml:"retention"`
	// MinRetention is the least retention.ms an existing topic may have:
	// one below it (or with retention 0) is refused at start, since a
	// loader that falls behind would lose what was acknowledged. Default 1h.
	MinRetention Duration `yaml:"min_retention"`
	// MaxMessageBytes is max.message.bytes of the topics tidemark creates
	// and the producer's batch limit. Default 20MiB (a 16 MiB value
	// passes); the broker's message.max.bytes must allow it.
	MaxMessageBytes ByteSize `yaml:"max_message_bytes"`
	// SendTimeout bounds how long a record may wait for the broker's
	// acknowledgement; past it the send fails and the pipeline stops
	// without acknowledging the source. Default 30s.
	SendTimeout Duration `yaml:"send_timeout"`
}

// Kafka defaults.
const (
	DefaultKafkaPartitions      = 1
	DefaultKafkaRetention       = Duration(7 * 24 * time.Hour)
	DefaultKafkaMinRetention    = Duration(time.Hour)
	DefaultKafkaMaxMessageBytes = ByteSize(20 << 20)
	DefaultKafkaSendTimeout     = Duration(30 * time.Second)
)

// SinkKafka is the kind of a kafka:// sink.
const SinkKafka = "kafka"

// SinkType is "" for the lake (the default: bronze and silver written by
// this process) or SinkKafka.
func (c *Config) SinkType() string {
	if strings.HasPrefix(strings.ToLower(strings.TrimSpace(c.Sink.Reveal())), "kafka://") {
		return SinkKafka
	}
	return ""
}

// KafkaBrokers returns the brokers of a kafka:// sink URL.
func (c *Config) KafkaBrokers() []string { return kafkaBrokers(c.Sink.Reveal()) }

// LoadBrokers returns the brokers of tidemark load's kafka:// from URL.
func (c *Config) LoadBrokers() []string { return kafkaBrokers(c.From.Reveal()) }

// kafkaBrokers returns the host:port list of a kafka:// URL.
func kafkaBrokers(u string) []string {
	s := strings.TrimSpace(u)
	if i := strings.Index(s, "://"); i < 0 {
		return nil
	}
	s = s[strings.Index(s, "://")+3:]
	if at := strings.LastIndex(s, "@"); at >= 0 {
		s = s[at+1:]
	}
	s, _, _ = strings.Cut(s, "/")
	s, _, _ = strings.Cut(s, "?")
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// topicName is the characters Kafka allows in a topic name.
var topicName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// checkSink validates sink, topic_prefix and the kafka block.
func (k *checker) checkSink() {
	c := k.c
	kc := &c.Kafka
	if kc.Partitions == 0 {
		kc.Partitions = DefaultKafkaPartitions
	}
	if kc.ReplicationFactor == 0 {
		kc.ReplicationFactor = -1
	}
	if kc.Retention == 0 {
		kc.Retention = DefaultKafkaRetention
	}
	if kc.MinRetention == 0 {
		kc.MinRetention = DefaultKafkaMinRetention
	}
	if kc.MaxMessageBytes == 0 {
		kc.MaxMessageBytes = DefaultKafkaMaxMessageBytes
	}
	if kc.SendTimeout == 0 {
		kc.SendTimeout = DefaultKafkaSendTimeout
	}
	if c.Sink.IsZero() {
		return
	}
	if c.SinkType() != SinkKafka {
		k.bad("sink", "want kafka://host:port[,host:port...] (or nothing: the lake); got a URL of another scheme")
		return
	}
	k.checkBrokers("sink", c.KafkaBrokers())
	k.checkTopicPrefix()
	if kc.Partitions < 1 {
		k.bad("kafka.partitions", "must be at least 1; got %d", kc.Partitions)
	}
	if kc.ReplicationFactor < -1 {
		k.bad("kafka.replication_factor", "must be at least 1, or -1 for the broker's default; got %d", kc.ReplicationFactor)
	}
	if kc.Retention < kc.MinRetention {
		k.bad("kafka.retention", "is below kafka.min_retention (%s): with a retention that short, what the source acknowledged could be deleted before a loader reads it", kc.MinRetention)
	}
	if kc.MaxMessageBytes < 1<<20 {
		k.bad("kafka.max_message_bytes", "must be at least 1MiB; got %d bytes", int64(kc.MaxMessageBytes))
	}
	if kc.SendTimeout < Duration(time.Second) {
		k.bad("kafka.send_timeout", "must be at least 1s; got %s", time.Duration(kc.SendTimeout))
	}
}

// checkBrokers validates the brokers of the kafka:// URL at path.
func (k *checker) checkBrokers(path string, brokers []string) {
	if len(brokers) == 0 {
		k.bad(path, "kafka:// needs at least one broker, e.g. kafka://broker:9092")
	}
	for _, b := range brokers {
		host, port, err := net.SplitHostPort(b)
		n, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || n <= 0 || n > 65535 {
			k.bad(path, "broker %s: want host:port, e.g. kafka://broker:9092", showValue(b))
		}
	}
}

// checkTopicPrefix defaults topic_prefix to the name and validates it.
func (k *checker) checkTopicPrefix() {
	c := k.c
	if c.TopicPrefix == "" {
		c.TopicPrefix = c.Name
	}
	if c.TopicPrefix == "" {
		k.bad("topic_prefix", "required: the prefix of the capture's topics (tidemark run's topic_prefix)")
		return
	}
	if !topicName.MatchString(c.TopicPrefix) || len(c.TopicPrefix) > 200 {
		k.bad("topic_prefix", "may hold only letters, digits, '.', '_' and '-', at most 200 of them (topic names are <prefix>.<schema>.<table>); got %s", showValue(c.TopicPrefix))
	}
}

// checkLoad validates from and group: required by tidemark load (load),
// refused elsewhere.
func (k *checker) checkLoad(load bool) {
	c := k.c
	if !load {
		if !c.From.IsZero() {
			k.bad("from", "is read by tidemark load only; tidemark run takes --source (and --sink kafka:// to publish)")
		}
		return
	}
	if c.From.IsZero() {
		k.bad("from", "required: the Kafka to load from, kafka://host:port[,host:port...]")
		return
	}
	if !strings.HasPrefix(strings.ToLower(strings.TrimSpace(c.From.Reveal())), "kafka://") {
		k.bad("from", "want kafka://host:port[,host:port...]; got a URL of another scheme")
		return
	}
	k.checkBrokers("from", c.LoadBrokers())
	k.checkTopicPrefix()
	if c.Group == "" {
		c.Group = "tidemark-load-" + c.TopicPrefix
	}
	if !topicName.MatchString(c.Group) {
		k.bad("group", "may hold only letters, digits, '.', '_' and '-'; got %s", showValue(c.Group))
	}
}
