package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestKafka: the broker starts, takes a topic, and a record produced with
// acks=all comes back to a consumer.
func TestKafka(t *testing.T) {
	k := testenv.StartKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr), kgo.ConsumeTopics("smoke"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "smoke"); err != nil {
		t.Fatalf("create topic: %v\n%s", err, k.Log())
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "smoke", Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	fs := cl.PollFetches(ctx)
	if err := fs.Err(); err != nil {
		t.Fatal(err)
	}
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Value) != "v" {
		t.Fatalf("consumed %v, want one record v", recs)
	}
}
