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

// TestLoadValidation: tidemark load takes from (kafka://) and a topic
// prefix instead of a source, its group defaults from the prefix, and
// run refuses from.
func TestLoadValidation(t *testing.T) {
	ok := &Config{From: NewSecret("kafka://user:secret@b1:9092,b2:9093"), TopicPrefix: "postgres_cdc.shop"}
	if err := ok.ValidateLoad(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ok.LoadBrokers(), ","); got != "b1:9092,b2:9093" || ok.Group != "tidemark-load-postgres_cdc.shop" || ok.Name != "" {
		t.Fatalf("brokers %s, group %q, name %q", got, ok.Group, ok.Name)
	}
	named := &Config{From: NewSecret("kafka://b:9092"), Name: "shop"}
	if err := named.ValidateLoad(); err != nil || named.TopicPrefix != "shop" {
		t.Fatalf("with a name: %v, prefix %q (want the name)", err, named.TopicPrefix)
	}
	for _, c := range []struct {
		cfg  Config
		path string
	}{
		{Config{TopicPrefix: "p"}, "from"},
		{Config{From: NewSecret("pulsar://b:6650"), TopicPrefix: "p"}, "from"},
		{Config{From: NewSecret("kafka://b"), TopicPrefix: "p"}, "from"},
		{Config{From: NewSecret("kafka://b:9092")}, "topic_prefix"},
		{Config{From: NewSecret("kafka://b:9092"), TopicPrefix: "a b"}, "topic_prefix"},
		{Config{From: NewSecret("kafka://b:9092"), TopicPrefix: "p", Group: "a/b"}, "group"},
	} {
		err := c.cfg.ValidateLoad()
		if err == nil || !strings.Contains(err.Error(), c.path+":") {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.path)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows a secret: %v", err)
		}
	}
	run := &Config{Source: NewSecret("postgres://u@h/shop"), From: NewSecret("kafka://b:9092")}
	if err := run.Validate(); err == nil || !strings.Contains(err.Error(), "from:") {
		t.Errorf("run with from: %v, want an error naming from", err)
	}
}
