package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrHoldLost ends a load session whose loader lost its hold on the lake
// (Hold): another loader of the same group may write it now.
var ErrHoldLost = errors.New("this loader lost its hold on the lake to another tidemark load of the same group (a rebalance, or its session with the brokers timed out)")

// holdSessionTimeout is how long the brokers wait for a loader's
// heartbeats before they give its hold to another (after a SIGKILL, the
// restarted loader waits about this long).
const holdSessionTimeout = 6 * time.Second

// Hold makes this loader the only one that writes the lake for its group:
// it joins the consumer group <group>.lock on the capture's one-partition
// checkpoint topic and returns once the brokers assign it that partition
// (another loader of the group holds it meanwhile: this one waits). held
// is ctx, cancelled with cause ErrHoldLost when the brokers take the
// partition away; release leaves the group (the next loader takes over
// at once). A loader that dies without leaving holds the lake until its
// session times out (holdSessionTimeout).
func (l *Loader) Hold(ctx context.Context) (held context.Context, release func(), err error) {
	topic := l.checkpointTopic()
	hctx, cancel := context.WithCancelCause(ctx)
	got := make(chan struct{})
	var once sync.Once
	lost := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		if len(m[topic]) > 0 {
			cancel(ErrHoldLost)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(l.opts.Brokers...),
		kgo.ConsumerGroup(l.opts.Group+".lock"), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.SessionTimeout(holdSessionTimeout), kgo.HeartbeatInterval(time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if len(m[topic]) > 0 {
				once.Do(func() { close(got) })
			}
		}),
		kgo.OnPartitionsRevoked(lost), kgo.OnPartitionsLost(lost),
	)
	if err != nil {
		cancel(nil)
		return nil, nil, fmt.Errorf("kafka: %w", err)
	}
	// The group's records are not needed; polling keeps its fetches drained.
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for hctx.Err() == nil {
			if fs := cl.PollFetches(hctx); fs.IsClientClosed() {
				return
			}
		}
	}()
	release = func() {
		cancel(nil)
		<-polled
		cl.Close() // leaves the group
	}
	select {
	case <-got:
		return hctx, release, nil
	case <-time.After(2 * time.Second):
		l.log.Warn("another tidemark load holds this lake (consumer group "+l.opts.Group+".lock); waiting for it to stop", "topic", topic)
	case <-hctx.Done():
	}
	select {
	case <-got:
		return hctx, release, nil
	case <-hctx.Done():
		release()
		return nil, nil, ctx.Err()
	}
}
