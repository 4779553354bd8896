package config

import (
	"strings"
	"testing"
)

// TestSinkValidation: a kafka:// sink is parsed into its brokers, the topic
// prefix defaults to the source name, and bad values name their key.
func TestSinkValidation(t *testing.T) {
	ok := &Config{Source: NewSecret("postgres://u@h/shop"), Sink: NewSecret("kafka://b1:9092,b2:9093")}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ok.KafkaBrokers(), ","); got != "b1:9092,b2:9093" || ok.TopicPrefix != "shop" || ok.SinkType() != SinkKafka {
		t.Fatalf("brokers %s, prefix %q, type %q", got, ok.TopicPrefix, ok.SinkType())
	}
	for _, c := range []struct {
		cfg  Config
		path string
	}{
		{Config{Sink: NewSecret("pulsar://b:6650")}, "sink"},
		{Config{Sink: NewSecret("kafka://")}, "sink"},
		{Config{Sink: NewSecret("kafka://b")}, "sink"},
		{Config{Sink: NewSecret("kafka://b:9092"), TopicPrefix: "a b"}, "topic_prefix"},
		{Config{Sink: NewSecret("kafka://b:9092"), Kafka: Kafka{Retention: Duration(60e9)}}, "kafka.retention"},
		{Config{Sink: NewSecret("kafka://b:9092"), Kafka: Kafka{Partitions: -2}}, "kafka.partitions"},
	} {
		c.cfg.Source = NewSecret("postgres://u@h/shop")
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.path+":") {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg.Sink, err, c.path)
		}
	}
}
